import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareIntake, topologyNames } from '../../libs/topology/index.js';
import { testMerchant, writeMerchantsFile } from '../support/harness.js';
import { startProgram } from '../support/process.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { cleanUp, killNode, leaders, nodeByName } from './cluster.js';

const urls = (process.env.CLUSTER_URLS ?? '').split(',');
const prefix = `cluster.retry.${randomBytes(3).toString('hex')}`;
const names = topologyNames(prefix);
const MERCHANTS = 20;

/**
 * Webhooks waiting in a retry tier when the node leading that tier dies must still get their next
 * attempt: the tier's dead-lettering back to dispatch has to survive the leader change.
 */
describe('a retry tier losing its leader', () => {
  let receiver: Receiver;
  let dispatcher: { child: ChildProcess; output: { stdout: string; stderr: string } };
  let broker: BrokerConnection;
  const killed: string[] = [];

  beforeAll(async () => {
    // Each merchant has its own URL (so its own circuit); each webhook fails once, then succeeds.
    receiver = await Receiver.start(failOnceThenSucceed());
    const merchants = Array.from({ length: MERCHANTS }, (_, i) => testMerchant(`m_${i}`, `${receiver.url}/${i}`));
    dispatcher = startProgram('dist/apps/dispatcher/main.js', {
      RABBITMQ_URL: urls.join(','),
      TOPOLOGY_PREFIX: prefix,
      MERCHANTS_FILE: writeMerchantsFile(merchants),
      RETRY_SCHEDULE: '2s',
      RETRY_OVERDUE_AFTER: '5s',
      ALLOW_PRIVATE_TARGETS: 'true',
      METRICS_PORT: '0',
      LOG_LEVEL: 'warn',
    });
    // The dispatcher declares everything first, so one node (its own) leads every queue, as when
    // a single program set the cluster up: losing that node loses every leader and its connection.
    await waitFor('topology declared', async () => (await leaders()).has(names.retry(0)), 60_000, 500);
    broker = new BrokerConnection({ url: urls, name: 'retry-leader-test', logger: silentLogger(), declare: (open) => declareIntake(open, prefix) });
    await broker.open(30_000);
  });

  afterAll(async () => {
    dispatcher?.child.kill('SIGTERM');
    if (dispatcher && dispatcher.child.exitCode === null) await once(dispatcher.child, 'exit');
    await broker?.close();
    await cleanUp(urls, killed, prefix);
    await receiver?.close();
  });

  it('still makes the next attempt of every webhook that was waiting in the tier', async () => {
    const publisher = new EventPublisher(broker, prefix);
    const ids: string[] = [];
    for (let i = 0; i < MERCHANTS; i++) ids.push((await publisher.publish(sampleEvent('payout', `m_${i}`))).messageId);
    await receiver.waitForRequests(MERCHANTS, 30_000);
    // All first attempts failed: the webhooks now wait 5 s in retry.0. Kill the node leading it.
    const led = await leaders();
    const leader = led.get(names.retry(0))!;
    expect(led.get(names.dispatch)).toBe(leader);
    await killNode(nodeByName(leader));
    killed.push(leader);
    const killedAt = Date.now();
    const secondAttempts = () => ids.filter((id) => receiver.requests.filter((r) => r.headers['webhook-id'] === id).length >= 2);
    await waitFor('every webhook attempted again', () => secondAttempts().length === ids.length, 120_000, 200).catch((err: unknown) => {
      console.log(JSON.stringify({ attemptedAgain: secondAttempts().length, of: ids.length, killed: leader, dispatcherLog: dispatcher.output.stdout.slice(-3000) }));
      throw err;
    });
    console.log(JSON.stringify({ killed: leader, retryDelayMs: 2_000, allAttemptedAgainAfterKillMs: Date.now() - killedAt }));
  });
});
