import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareIntake } from '../../libs/topology/index.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { startProgram } from '../support/process.js';
import { freePort, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { cleanUp, killNode, nodeHoldingConnection } from './cluster.js';

const urls = (process.env.CLUSTER_URLS ?? '').split(',');
const prefix = `cluster.lb.${randomBytes(3).toString('hex')}`;

function haproxyInstalled(): boolean {
  try {
    execFileSync('haproxy', ['-v'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** haproxy in TCP mode in front of the three nodes, checking each every 500 ms, as users run it. */
async function startHaproxy(port: number): Promise<ChildProcess> {
  const backends = urls.map((url, i) => `  server c${i + 1} ${new URL(url).host} check inter 500 fall 1 rise 2`).join('\n');
  const file = join(mkdtempSync(join(tmpdir(), 'webhooks-haproxy-')), 'haproxy.cfg');
  writeFileSync(
    file,
    [
      'global',
      '  maxconn 1000',
      'defaults',
      '  mode tcp',
      '  timeout connect 2s',
      '  timeout client 1h',
      '  timeout server 1h',
      'frontend amqp',
      `  bind 127.0.0.1:${port}`,
      '  default_backend nodes',
      'backend nodes',
      '  balance roundrobin',
      backends,
      '',
    ].join('\n'),
  );
  const child = spawn('haproxy', ['-db', '-f', file], { stdio: 'ignore' });
  return child;
}

/** One URL, a load balancer's, in front of the cluster: the programs reconnect through it. */
(haproxyInstalled() ? describe : describe.skip)('behind a load balancer (haproxy)', () => {
  let receiver: Receiver;
  let haproxy: ChildProcess;
  let dispatcher: { child: ChildProcess; output: { stdout: string; stderr: string } };
  let broker: BrokerConnection;
  let database: TestDatabase;
  const killed: string[] = [];

  beforeAll(async () => {
    receiver = await Receiver.start(() => 204);
    const port = await freePort();
    haproxy = await startHaproxy(port);
    const lbUrl = `amqp://guest:guest@127.0.0.1:${port}`;
    // Merchants and waiting webhooks are rows of PostgreSQL.
    database = await createTestDatabase('cluster_lb');
    await seedMerchants(database.url, [testMerchant('m_lb', receiver.url)]);
    broker = new BrokerConnection({ url: urls, name: 'lb-test-publisher', logger: silentLogger(), declare: (open) => declareIntake(open, prefix) });
    await broker.open(30_000);
    dispatcher = startProgram('dist/apps/dispatcher/main.js', {
      RABBITMQ_URL: lbUrl,
      TOPOLOGY_PREFIX: prefix,
      SECRETS_KEY: TEST_SECRETS_KEY,
      DATABASE_URL: database.url,
      RETRY_SCHEDULE: '1s',
      ALLOW_PRIVATE_TARGETS: 'true',
      METRICS_PORT: '0',
      LOG_LEVEL: 'info',
    });
    await waitFor('dispatcher consuming', () => {
      // A dispatcher that exited (bad configuration) says why at once, not after the minute.
      if (dispatcher.child.exitCode !== null) throw new Error(`dispatcher exited ${dispatcher.child.exitCode}: ${dispatcher.output.stderr}`);
      return dispatcher.output.stdout.includes('dispatcher consuming');
    }, 60_000, 100);
  });

  afterAll(async () => {
    dispatcher?.child.kill('SIGTERM');
    if (dispatcher && dispatcher.child.exitCode === null) await once(dispatcher.child, 'exit');
    await broker?.close();
    haproxy?.kill('SIGTERM');
    await cleanUp(urls, killed, prefix);
    await receiver?.close();
    await database?.drop();
  });

  it('delivers every event when the node behind its one URL dies, reconnecting through the load balancer', async () => {
    const publisher = new EventPublisher(broker, prefix);
    const publish = async (tag: string, count: number) => {
      const ids: string[] = [];
      for (let i = 0; i < count; i++) {
        const messageId = `${tag}_${i}`;
        await waitFor(`publish ${messageId}`, () => publisher.publish(sampleEvent('payout', 'm_lb'), { messageId }).then(() => true, () => false), 60_000, 100);
        ids.push(messageId);
      }
      return ids;
    };
    const before = await publish('before', 500);
    await receiver.waitForRequests(100, 60_000);
    const node = await nodeHoldingConnection('webhooks-dispatcher', urls);
    expect(node).toBeDefined();
    const killedAt = Date.now();
    await killNode(node!);
    killed.push(node!.name);
    const after = await publish('after', 100);
    // One set per poll, not one per id: the receiver answers from this process.
    const allDelivered = () => {
      const seen = new Set(receiver.requests.map((r) => String(r.headers['webhook-id'])));
      return [...before, ...after].every((id) => seen.has(id));
    };
    await waitFor('every event delivered', allDelivered, 180_000, 200);
    const reconnected = await nodeHoldingConnection('webhooks-dispatcher', urls);
    expect(reconnected?.name).not.toBe(node!.name);
    console.log(JSON.stringify({ killed: node!.name, reconnectedTo: reconnected?.name, allDeliveredAfterKillMs: Date.now() - killedAt }));
    expect(dispatcher.child.exitCode).toBeNull();
  });
});
