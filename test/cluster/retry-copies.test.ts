import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareTopology, topologyNames } from '../../libs/topology/index.js';
import { testMerchant, writeMerchantsFile } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { startProgram } from '../support/process.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { cleanUp, killNode, leaders, nodeByName } from './cluster.js';

const urls = (process.env.CLUSTER_URLS ?? '').split(',');
const prefix = `cluster.copies.${randomBytes(3).toString('hex')}`;
const names = topologyNames(prefix);
/** A merchant (an endpoint, a circuit) per webhook: every first attempt fails, and a shared endpoint's circuit would open. */
const EVENTS = 1_000;
const CONCURRENCY = 64;

/** How often each log message appears: the dispatcher's story in one line. */
function messageCounts(log: string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const match of log.matchAll(/"message":"([^"]+)"/g)) counts[match[1]!] = (counts[match[1]!] ?? 0) + 1;
  return counts;
}

/**
 * Moves into a retry tier while the node leading `dispatch` and the tier dies under load: each
 * webhook gets one retry chain, failed once, delivered once, and retries keep flowing. (A publish
 * whose confirm is lost is made again and may leave two copies in the tier; in the runs so far
 * that path was not hit: `movesRetried` is logged.)
 */
describe('moves into a retry tier whose leader dies under load', () => {
  let receiver: Receiver;
  let dispatcher: { child: ChildProcess; output: { stdout: string; stderr: string } };
  let recorder: { child: ChildProcess; output: { stdout: string; stderr: string } };
  let broker: BrokerConnection;
  let database: TestDatabase;
  const killed: string[] = [];

  beforeAll(async () => {
    // The retry safety net reads the delivery log: a recorder fills it. On 3.10 a tier whose leader
    // died can stop dead-lettering what it holds; the net puts those back in dispatch.
    database = await createTestDatabase('cluster_retry_copies');
    receiver = await Receiver.start(failOnceThenSucceed());
    const merchants = Array.from({ length: EVENTS }, (_, i) => testMerchant(`m_${i}`, `${receiver.url}/${i}`));
    // Node 1 declares everything, so it leads every queue; the dispatcher and the publisher use
    // nodes 2 and 3, so losing node 1 loses leaders, not their connections.
    broker = new BrokerConnection({
      url: [urls[1]!, urls[2]!],
      name: 'retry-copies-test',
      logger: silentLogger(),
    });
    const declarer = new BrokerConnection({
      url: urls[0]!,
      name: 'retry-copies-declare',
      logger: silentLogger(),
      declare: (open) => declareTopology(open, { prefix, retryDelaysMs: [1_000], failedRetention: '1D' }),
    });
    await declarer.open(30_000);
    await declarer.close();
    await broker.open(30_000);
    recorder = startProgram('dist/apps/recorder/main.js', {
      RABBITMQ_URL: `${urls[1]},${urls[2]}`,
      TOPOLOGY_PREFIX: prefix,
      DATABASE_URL: database.url,
      LOG_LEVEL: 'warn',
    });
    dispatcher = startProgram('dist/apps/dispatcher/main.js', {
      RABBITMQ_URL: `${urls[1]},${urls[2]}`,
      TOPOLOGY_PREFIX: prefix,
      MERCHANTS_FILE: writeMerchantsFile(merchants),
      DATABASE_URL: database.url,
      RETRY_OVERDUE_AFTER: '5s',
      RETRY_SCHEDULE: '1s',
      FAILED_RETENTION: '1D',
      DISPATCH_CONCURRENCY: String(CONCURRENCY),
      ALLOW_PRIVATE_TARGETS: 'true',
      METRICS_PORT: '0',
      LOG_LEVEL: 'info',
    });
    await waitFor('dispatcher consuming', () => dispatcher.output.stdout.includes('dispatcher consuming'), 60_000, 200);
  });

  afterAll(async () => {
    for (const program of [dispatcher, recorder]) {
      program?.child.kill('SIGTERM');
      if (program && program.child.exitCode === null) await once(program.child, 'exit');
    }
    await broker?.close();
    await cleanUp(urls, killed, prefix);
    await receiver?.close();
    await database?.drop();
  });

  it('starts one retry chain per webhook and keeps retries flowing: every webhook fails once and is delivered, and only deliveries in flight at the kill are POSTed again', async () => {
    const led = await leaders();
    const leader = led.get(names.retry(0))!;
    expect(led.get(names.dispatch)).toBe(leader);
    expect(leader).toBe('webhooks-c1@localhost');
    const publisher = new EventPublisher(broker, prefix);
    const ids: string[] = [];
    let kill: Promise<void> | undefined;
    for (let i = 0; i < EVENTS; i++) {
      ids.push((await publisher.publish(sampleEvent('payout', `m_${i}`))).messageId);
      // Under load, with first attempts failing and moves into retry.0 awaiting confirms.
      if (i === EVENTS / 4) {
        kill = killNode(nodeByName(leader));
        killed.push(leader);
      }
    }
    await kill;
    const count = new Map<string, number>();
    const tally = () => {
      count.clear();
      for (const r of receiver.requests) count.set(String(r.headers['webhook-id']), (count.get(String(r.headers['webhook-id'])) ?? 0) + 1);
      return ids.filter((id) => (count.get(id) ?? 0) >= 2).length;
    };
    await waitFor('every webhook delivered', () => tally() === EVENTS, 180_000, 500).catch(async (err: unknown) => {
      const saved = join(tmpdir(), `retry-copies-${Date.now()}.log`);
      writeFileSync(saved, dispatcher.output.stdout + dispatcher.output.stderr);
      console.log(JSON.stringify({ delivered: tally(), of: EVENTS, log: messageCounts(dispatcher.output.stdout), dispatcherLog: saved }));
      throw err;
    });
    // Time for a second chain, if one was started, to make its attempts (1 s tier).
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    tally();
    const log = dispatcher.output.stdout;
    const twice = ids.filter((id) => count.get(id) !== 2);
    console.log(
      JSON.stringify({
        killed: leader,
        notTwice: twice.length,
        movesRetried: log.split('message could not be moved; retrying').length - 1,
        rescued: log.split('stranded retry republished').length - 1,
        log: messageCounts(log),
      }),
    );
    // Losing the node that leads dispatch loses the acks of the deliveries in flight: the broker
    // hands those back and they are POSTed again (at-least-once, bounded by the prefetch, twice
    // DISPATCH_CONCURRENCY: requests in flight and deliveries whose record and ack are going out).
    // A second retry chain would double a webhook's retries far beyond that, and a third POST of a
    // webhook that was never in flight shows as a fourth.
    expect(ids.filter((id) => (count.get(id) ?? 0) > 3)).toEqual([]);
    expect(twice.length).toBeLessThanOrEqual(2 * CONCURRENCY);
  }, 300_000);
});
