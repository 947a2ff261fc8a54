import { createHash } from 'node:crypto';
import pg from 'pg';
import type { EventName } from '../../libs/contracts/index.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareIntake } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants } from '../support/merchant-rows.js';
import { attemptReceiver, eventOf, sentOutOfOrder, timeline } from '../support/order.js';
import { createTestDatabase } from '../support/postgres.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { dispatcherEnv, startProgram } from '../support/process.js';
import { waitFor } from '../support/wait.js';

/**
 * Order per reference (issue 55) through faults the issue names: PostgreSQL crashed and started
 * again (a server of the test's own) while an ordered merchant's webhooks flow, and dispatchers
 * joining and leaving under load. In both, every webhook is delivered, once its reference's
 * earlier ones (in the order PostgreSQL admitted them) are. Seen failing on broken variants: a gate
 * that sends a webhook found behind without waiting (both tests), and one that sends a webhook as
 * head when PostgreSQL does not answer its admission within a second (the restart).
 */

/** How long PostgreSQL stays down: long enough for the first retries to fall due meanwhile. */
const OUTAGE_MS = 4_000;
const EVENTS: EventName[] = ['charge.completed', 'refund.completed', 'refund.completed'];

type Program = ReturnType<typeof startProgram>;

/** An ordered merchant, its receiver (the first attempt of about a fifth of the webhooks, and of every charge, answered 409), a publisher. */
async function ordered(name: string, databaseUrl: string) {
  const prefix = uniquePrefix(name);
  const test = await TestBroker.open();
  const broker = new BrokerConnection({ url: brokerUrl(), name: `test-${name}`, logger: silentLogger() });
  await broker.open(10_000);
  const channel = await broker.createChannel();
  await declareIntake(channel, prefix);
  await channel.close();
  // 409 is retried and leaves the endpoint's circuit closed (the endpoint answers).
  const { receiver, delivered } = await attemptReceiver((id, attempt, body) =>
    attempt === 1 && (JSON.parse(body).event === 'charge.completed' || createHash('sha256').update(id).digest()[0]! < 51) ? 409 : undefined);
  const merchant = testMerchant(`m_${name.replace(/-/g, '_')}`, receiver.url);
  merchant.endpoints[0]!.orderByReference = true;
  await seedMerchants(databaseUrl, [merchant]);
  const env = dispatcherEnv(prefix, databaseUrl, {
    RETRY_SCHEDULE: '1s,1s,1s,1s,1s,1s,1s,1s,1s,60s',
    WAIT_LEASE: '5s',
    DISPATCH_CONCURRENCY: '16',
  });
  const publisher = new EventPublisher(broker, prefix);
  const published: string[] = [];
  return {
    receiver,
    published,
    start: (): Program => startProgram('dist/apps/dispatcher/main.js', env),
    /** Publishes event `k` of each reference in `refs`. */
    async publish(k: number, refs: Iterable<number>): Promise<void> {
      const batch: Array<Promise<unknown>> = [];
      for (const r of refs) {
        const id = `evt_${r}_${k}`;
        published.push(id);
        batch.push(publisher.publish(eventOf(EVENTS[k]!, merchant.id, `REF-${r}`), { messageId: id }));
      }
      await Promise.all(batch);
    },
    deliveredCount: () => new Set([...delivered].map((n) => receiver.requests[n]!.headers['webhook-id'])).size,
    /** Every published webhook delivered, each after the ones before it in its reference's line. */
    async expectAllInOrder(query: (sql: string, params: unknown[]) => Promise<Array<{ order_key: string; webhook_id: string }>>, programs: Program[]): Promise<void> {
      const done = () => {
        const line = timeline(receiver.requests, delivered);
        return published.every((id) => line.get(id)?.done !== undefined);
      };
      await waitFor('every webhook delivered', done, 120_000).catch((err: unknown) => {
        const line = timeline(receiver.requests, delivered);
        const missing = published.filter((id) => line.get(id)?.done === undefined);
        const output = programs.map((p) => p.output.stdout.split('\n').filter((l) => /"level":"(warn|error)"/.test(l)).slice(-5).join('\n')).join('\n--\n');
        throw new Error(`${(err as Error).message}: ${missing.length} of ${published.length} not delivered (${missing.slice(0, 10).join(', ')}); dispatchers' last warnings:\n${output}`);
      });
      const rows = await query('SELECT order_key, webhook_id FROM webhook_order WHERE merchant_id = $1 ORDER BY order_key, seq', [merchant.id]);
      expect(rows.map((row) => row.webhook_id).sort()).toEqual([...published].sort());
      expect(sentOutOfOrder(rows, timeline(receiver.requests, delivered))).toEqual([]);
    },
    async close(): Promise<void> {
      await receiver.close();
      await broker.close();
      await test.deleteTopology(prefix);
      await test.close();
    },
  };
}

async function stopAll(programs: Program[]): Promise<void> {
  for (const p of programs) if (p.child.exitCode === null) p.child.kill('SIGTERM');
  await Promise.all(programs.map((p) => p.finished));
}

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

describe('PostgreSQL crashed and started again while an ordered merchant’s webhooks flow', () => {
  it('holds each reference in order: its webhooks wait unacked while PostgreSQL is down, none is lost', async () => {
    const server = await PrivatePostgres.start();
    if (!server) throw new Error(`no PostgreSQL binaries to start a server of the test's own (PG_BIN_DIR)`);
    const scenario = await ordered('order-pg-restart', server.url);
    const dispatcher = scenario.start();
    try {
      // Each charge's first attempt is refused: it waits a second, with its refund behind it.
      await scenario.publish(0, range(0, 100));
      await scenario.publish(1, range(0, 100));
      await waitFor('every charge attempted once', () => scenario.receiver.requests.length >= 100, 30_000);
      await server.crash();
      const down = Date.now();
      // While it is down: the second refund of those, and new references.
      await scenario.publish(2, range(0, 100));
      await scenario.publish(0, range(100, 150));
      await scenario.publish(1, range(100, 150));
      await waitFor('the dispatcher holding its order steps', () => dispatcher.output.stdout.includes('order steps not written'), 30_000);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, OUTAGE_MS - (Date.now() - down))));
      await server.up();
      const client = new pg.Client({ connectionString: server.url });
      await client.connect();
      try {
        await scenario.expectAllInOrder(async (sql, params) => (await client.query(sql, params)).rows, [dispatcher]);
      } finally {
        await client.end();
      }
    } finally {
      await stopAll([dispatcher]);
      await scenario.close();
      await server.stop();
    }
  }, 240_000);
});

describe('dispatchers joining and leaving under load', () => {
  it('deliver every webhook, each reference in order', async () => {
    const database = await createTestDatabase('order_join_leave');
    const scenario = await ordered('order-join-leave', database.url);
    const first = scenario.start();
    const second = scenario.start();
    const programs = [first, second];
    try {
      await scenario.publish(0, range(0, 300));
      await scenario.publish(1, range(0, 300));
      await waitFor('a quarter delivered', () => scenario.deliveredCount() >= 200, 60_000);
      // A third joins, and the second refunds come.
      programs.push(scenario.start());
      await scenario.publish(2, range(0, 300));
      await waitFor('half delivered', () => scenario.deliveredCount() >= 450, 60_000);
      // The first leaves (SIGTERM: its deliveries in flight settle or go back to the queue).
      first.child.kill('SIGTERM');
      expect((await first.finished).code).toBe(0);
      await scenario.expectAllInOrder((sql, params) => database.query(sql, params), programs);
    } finally {
      await stopAll(programs);
      await scenario.close();
      await database.drop();
    }
  }, 240_000);
});
