import pg from 'pg';
import type { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { uniquePrefix } from '../support/broker.js';
import { FrozenProxy } from '../support/frozen-proxy.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants } from '../support/merchant-rows.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { dispatcherEnv, startProgram } from '../support/process.js';
import { localCtl } from '../support/rabbitmqctl.js';
import { Receiver, type ReceivedRequest } from '../support/receiver.js';
import { endSpawnedDispatchers, openUpstream } from '../support/spawned-dispatchers.js';
import { waitFor } from '../support/wait.js';

type Program = ReturnType<typeof startProgram>;

/** A's prefetch (twice DISPATCH_CONCURRENCY): the webhooks of the test fill it, so B takes none of them at first. */
const HELD = 10;

/**
 * The answer to a batch of wait writes lost on its way back: the transaction committed, the
 * dispatcher that sent it (A, behind a proxy that drops PostgreSQL's replies from the COMMIT on) never
 * hears so, and tries it again once its connection is reset. Meanwhile another dispatcher (B) picks the rows A
 * wrote, delivers them and ends their waits: A's retry must not write those waits anew (each
 * would be delivered a second time).
 */
describe('a batch of wait writes committed whose answer is lost', () => {
  const prefix = uniquePrefix('waits-answer-lost');
  let server: PrivatePostgres | undefined;
  let proxy: FrozenProxy | undefined;
  let receiver: Receiver;
  let broker: BrokerConnection;
  const programs: Program[] = [];

  beforeAll(async () => {
    server = await PrivatePostgres.start();
    if (server) proxy = await FrozenProxy.start(server.url);
    // Each webhook's first attempt refused (409: it must wait, the circuit stays closed), then delivered.
    const seen = new Set<string>();
    receiver = await Receiver.start((_n, req) => {
      const id = String(req.headers['webhook-id']);
      if (seen.has(id)) return 204;
      seen.add(id);
      // From the first attempt of the test's webhooks on, a commit's answer is lost (with all after it on
      // its connection): their waits' batch is the first A commits then.
      if (id.startsWith('evt_lost_')) proxy?.dropRepliesAfterCommit();
      return 409;
    });
    broker = await openUpstream(prefix, 'waits-answer-lost');
  }, 60_000);

  afterAll(() => endSpawnedDispatchers(prefix, programs, [broker, receiver, proxy], server), 60_000);

  // Before the batch's transaction id was asked first (WaitStore.write), evt_lost_0 was delivered twice:
  // by B from A's committed wait, then again 0.5 s after the cut, from the row A's retried batch wrote
  // anew (a put that finds no row cannot tell a wait ended meanwhile from one never written).
  it('delivers each webhook once: the retried batch writes no wait that was handed on and ended meanwhile', async () => {
    const ctl = localCtl();
    if (!server || !proxy || !ctl) {
      console.warn('skipped: no PostgreSQL server binaries (PG_BIN_DIR) to run a private server, or no local rabbitmqctl');
      return;
    }
    const merchant = testMerchant('m_answer_lost', `${receiver.url}/m_answer_lost`);
    await seedMerchants(server.url, [merchant]);
    const env = (databaseUrl: string) => dispatcherEnv(prefix, databaseUrl, {
      RETRY_SCHEDULE: '500ms,500ms,500ms',
      DISPATCH_CONCURRENCY: String(HELD / 2),
    });
    const start = (databaseUrl: string) => {
      const program = startProgram('dist/apps/dispatcher/main.js', env(databaseUrl));
      programs.push(program);
      return program;
    };
    const a = start(proxy.url);
    await waitFor('A consuming', () => a.output.stdout.includes('dispatcher consuming'), 30_000, 100);
    const publisher = new EventPublisher(broker, prefix);
    const delivered = () => receiver.requests.filter((r) => r.headers['webhook-id'] && receiver.requests.some((q) => q !== r && idOf(q) === idOf(r) && q.at < r.at));
    // A warm-up: A's waits' pool has its connections open (the ones whose answers will be lost).
    const warm = await Promise.all(Array.from({ length: HELD }, () => publisher.publish(sampleEvent('payout', merchant.id))));
    await waitFor('the warm-up delivered', () => new Set(delivered().map(idOf)).size === warm.length, 20_000, 100);
    const ids = Array.from({ length: HELD }, (_, n) => `evt_lost_${n}`);
    const db = new pg.Client({ connectionString: server.url });
    await db.connect();
    try {
      // And its waits ended: an end still unwritten when the answers start to be lost held its delivery
      // unacked, a prefetch slot fewer, and some of the webhooks below never came to A (CI: "A's first
      // attempts refused" timed out).
      await waitFor("the warm-up's waits ended", async () => Number((await db.query('SELECT count(*) FROM webhook_waits')).rows[0].count) === 0, 20_000, 100);

      await Promise.all(ids.map((messageId) => publisher.publish(sampleEvent('payout', merchant.id), { messageId })));
      await waitFor("A's first attempts refused", () => ids.every((id) => receiver.requests.some((r) => idOf(r) === id)), 20_000, 100);
      const written = await waitFor('the waits A wrote committed', async () => {
        const rows = (await db.query('SELECT webhook_id FROM webhook_waits')).rows.map((row) => String(row.webhook_id));
        return rows.length > 0 && rows;
      }, 10_000, 100);
      // B picks the waits A committed, delivers them and ends their waits.
      start(server.url);
      await waitFor('B delivered what A wrote', () => written.every((id) => delivered().some((r) => idOf(r) === id)), 30_000, 100).catch(async (err: Error) => {
        const waits = (await db.query('SELECT webhook_id, hand, takes, pick_at > now() AS later FROM webhook_waits')).rows;
        const sessions = (await db.query("SELECT application_name, state, left(query, 40) AS q FROM pg_stat_activity WHERE application_name LIKE 'webhooks%'")).rows;
        throw new Error(`${err.message}: ${delivered().filter((r) => ids.includes(idOf(r))).length} delivered; waits ${JSON.stringify(waits)}; sessions ${JSON.stringify(sessions)}`);
      });
      await waitFor('the waits ended', async () => Number((await db.query('SELECT count(*) FROM webhook_waits')).rows[0].count) === 0, 10_000, 100);
      proxy.cut();
      // A writes its batch again (and acks); then whatever it wrote is picked and ended.
      await waitFor('A acked what it held', async () => {
        const { stdout } = await ctl(['-q', 'list_queues', 'name', 'messages']);
        return stdout.split('\n').some((line) => line.trim().split(/\s+/).join(' ') === `${prefix}.dispatch 0`);
      }, 40_000, 500);
      await waitFor('no wait left', async () => Number((await db.query('SELECT count(*) FROM webhook_waits')).rows[0].count) === 0, 20_000, 100);
    } finally {
      await db.end();
    }
    const twice = ids.filter((id) => delivered().filter((r) => idOf(r) === id).length > 1);
    expect({ twice, of: ids.length }).toEqual({ twice: [], of: ids.length });
  }, 180_000);
});

function idOf(r: ReceivedRequest): string {
  return String(r.headers['webhook-id']);
}
