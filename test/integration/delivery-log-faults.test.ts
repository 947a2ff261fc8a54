import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { BrokerConnection } from '../../libs/broker/index.js';
import { type DeliveryRecordInput, DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { DeliveryLogRecorder, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { call, startTestApi, token } from '../support/api.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { runProgram, startProgram } from '../support/process.js';
import { waitFor } from '../support/wait.js';

const RECORDER = 'dist/apps/recorder/main.js';

/** A webhook's story: three failed attempts and a delivery, four records. */
function recordsOf(merchantId: string, n: number): DeliveryRecordInput[] {
  const firstSeenAt = new Date().toISOString();
  const base = { webhookId: `wh_${merchantId}_${n}`, merchantId, event: 'payout', references: [`po-${n}`], firstSeenAt, payload: JSON.stringify({ event: 'payout', data: { reference: `po-${n}` } }) };
  const attempt = (i: number, status: number) => ({ startedAt: new Date().toISOString(), durationMs: i, httpStatus: status });
  return [
    { ...base, outcome: 'retrying', attemptNumber: 1, attempt: attempt(1, 500) },
    { ...base, outcome: 'retrying', attemptNumber: 2, attempt: attempt(2, 502) },
    { ...base, outcome: 'retrying', attemptNumber: 3, attempt: attempt(3, 503) },
    { ...base, outcome: 'delivered', attemptNumber: 4, attempt: attempt(4, 200) },
  ];
}

interface Exactness {
  records: number;
  distinctRecords: number;
  webhooks: number;
  attempts: number;
  delivered: number;
  nextOffset: number;
}

async function exactness(db: TestDatabase, stream: string): Promise<Exactness> {
  const [row] = await db.query<Record<string, string>>(
    `SELECT (SELECT count(*) FROM delivery_records) AS records,
            (SELECT count(DISTINCT id) FROM delivery_records) AS distinct_records,
            (SELECT count(*) FROM delivery_webhooks) AS webhooks,
            (SELECT coalesce(sum(attempts), 0) FROM delivery_webhooks) AS attempts,
            (SELECT count(*) FROM delivery_webhooks WHERE status = 'delivered') AS delivered,
            (SELECT coalesce(max(next_offset), 0) FROM delivery_log_offsets WHERE stream = $1) AS next_offset`,
    [stream],
  );
  return {
    records: Number(row!.records),
    distinctRecords: Number(row!.distinct_records),
    webhooks: Number(row!.webhooks),
    attempts: Number(row!.attempts),
    delivered: Number(row!.delivered),
    nextOffset: Number(row!.next_offset),
  };
}

const exact = (webhooks: number, streamMessages: number): Exactness => ({
  records: webhooks * 4,
  distinctRecords: webhooks * 4,
  webhooks,
  attempts: webhooks * 4,
  delivered: webhooks,
  nextOffset: streamMessages,
});

describe('the delivery log under faults', () => {
  const prefix = uniquePrefix('delivery-log-faults');
  const stream = topologyNames(prefix).deliveries;
  // A server of this file's own, so that restarting it touches no other test (the shared one when
  // there are no server binaries to run one; the restart is then skipped).
  let server: PrivatePostgres | undefined;
  let db: TestDatabase;
  let test: TestBroker;
  let broker: BrokerConnection;
  let writer: DeliveryRecorder;

  beforeAll(async () => {
    server = await PrivatePostgres.start();
    db = await createTestDatabase('delivery_log_faults', server?.url);
    test = await TestBroker.open();
    broker = new BrokerConnection({ url: brokerUrl(), name: 'delivery-log-faults-test', logger: silentLogger() });
    await broker.open();
    // Small stream messages, so that a recorder transaction spans many and a kill lands inside one.
    writer = new DeliveryRecorder(broker, silentLogger(), { prefix, maxRecords: 20 });
    await writer.start();
  });

  afterAll(async () => {
    await writer?.stop();
    await broker?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await db?.drop();
    await server?.stop();
  });

  const env = () => ({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: db.url, LOG_LEVEL: 'error' });

  it('leaves the log exact when the recorder is killed (SIGKILL) in the middle of its batches', async () => {
    const webhooks = 5_000;
    const records = Array.from({ length: webhooks }, (_, n) => recordsOf('m_kill', n)).flat();
    await Promise.all(records.map((r) => writer.record(r)));

    const first = startProgram(RECORDER, env());
    await waitFor('the recorder storing', async () => ((await exactness(db, stream).catch(() => undefined))?.records ?? 0) > 0, 30_000, 5);
    const stored = (await exactness(db, stream)).records;
    first.child.kill('SIGKILL');
    await first.finished;
    expect(stored).toBeGreaterThan(0);
    expect(stored).toBeLessThan(records.length);

    const second = startProgram(RECORDER, env());
    try {
      await waitFor('the log complete', async () => (await exactness(db, stream)).records === records.length, 60_000, 100);
      // The stream's message count is reported with a delay (longer on a loaded machine, where 10 s
      // did not always do): wait until it and the stored offset agree.
      let seen = {};
      // The log as it stood when its offset matched the stream: the recorder's checkpoint, appended every
      // few seconds, may add a message right after, so the log is not read again.
      const [messages, stored] = await waitFor('the offset stored', async () => {
        const count = await test.messageCount(stream);
        const log = await exactness(db, stream);
        seen = { count, stored: log.nextOffset };
        return count > 0 && log.nextOffset === count && ([count, log] as const);
      }, 30_000, 100).catch((err: Error) => {
        throw new Error(`${err.message}: last seen ${JSON.stringify(seen)}`);
      });
      expect(stored).toEqual(exact(webhooks, messages));
    } finally {
      second.child.kill('SIGTERM');
      expect((await second.finished).code).toBe(0);
    }
  });

  it('leaves the log exact when PostgreSQL restarts while records keep coming', async () => {
    if (!server) {
      console.warn('skipped: no PostgreSQL server binaries (PG_BIN_DIR) to run a private server that can be restarted');
      return;
    }
    const database = openPostgres(db.url);
    const recorder = new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    await recorder.start();
    try {
      const before = await exactness(db, stream);
      // Records keep coming before, during and after the restart: until 500 webhooks past its end
      // (some 3 s, the recorder's reconnect 200 ms), not a fixed 2,000 that went on 12 s after it.
      let restarted = false;
      let afterRestart = 0;
      let webhooks = 0;
      const writing = (async () => {
        for (; !restarted || afterRestart < 500; webhooks++) {
          if (restarted) afterRestart++;
          await Promise.all(recordsOf('m_restart', webhooks).map((r) => writer.record(r)));
        }
      })();
      await waitFor('some records of this run stored', async () => (await exactness(db, stream)).records > before.records, 30_000, 20);
      const startedAt = async () => (await db.query<{ at: string }>('SELECT pg_postmaster_start_time()::text AS at'))[0]!.at;
      const upSince = await startedAt();
      await server.restart();
      restarted = true;
      await writing;
      await waitFor('the log complete after the restart', async () => (await exactness(db, stream).catch(() => before)).records === before.records + webhooks * 4, 60_000, 200);
      // As above: the log as it stood when its offset matched the stream, before the next checkpoint.
      const [messages, stored] = await waitFor('the offset stored', async () => {
        const count = await test.messageCount(stream);
        const log = await exactness(db, stream);
        return count > before.nextOffset && log.nextOffset === count && ([count, log] as const);
      }, 10_000, 100);
      expect(stored).toEqual(exact(webhooks + before.webhooks, messages));
      expect(await startedAt()).not.toBe(upSince); // it did restart
    } finally {
      await recorder.stop();
      await database.close();
    }
  }, 180_000); // its own waits (30 s, the restart, 60 s, the offset) add up past jest's default 60 s

  it('lets one recorder write at a time: a standby takes the lead when the leader stops, and the log stays exact', async () => {
    const databases = [openPostgres(db.url), openPostgres(db.url)];
    const [a, b] = databases.map((database) => new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 100 }));
    try {
      await a!.start();
      await waitFor('a leading', () => a!.state.leading);
      await b!.start();
      const before = await exactness(db, stream);
      await Promise.all(recordsOf('m_standby', 1).map((r) => writer.record(r)));
      await waitFor('stored by the leader', async () => (await exactness(db, stream)).records === before.records + 4);
      // Several lock attempts have passed: the standby is still standing by.
      expect(b!.state.leading).toBe(false);
      await a!.stop();
      await waitFor('b leading', () => b!.state.leading, 10_000);
      await Promise.all(recordsOf('m_standby', 2).map((r) => writer.record(r)));
      await waitFor('stored by the new leader', async () => (await exactness(db, stream)).records === before.records + 8);
      expect(b!.state.recordsStored).toBe(4);
    } finally {
      await a!.stop();
      await b!.stop();
      for (const database of databases) await database.close();
    }
  });

  it('is started twice and stopped twice without a second lead attempt or a listener left on the broker', async () => {
    const database = openPostgres(db.url);
    const listening = () => broker.listenerCount('connected') + broker.listenerCount('disconnected');
    const before = listening();
    const recorder = new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 100 });
    let sessions = 0;
    const session = database.session.bind(database);
    database.session = () => (sessions++, session());
    try {
      await Promise.all([recorder.start(), recorder.start()]);
      await recorder.start();
      await waitFor('leading', () => recorder.state.leading);
      expect(sessions).toBe(1);
      expect(listening()).toBe(before + 2);
    } finally {
      await Promise.all([recorder.stop(), recorder.stop()]);
      await database.close();
    }
    expect(listening()).toBe(before);
  });

  it('gives the lead up and takes it again when an insert is refused at once, with no unhandled rejection', async () => {
    // In a program of its own: jest does not see unhandled rejections, and Node 20 ends a process
    // on one. Its batch's first statement is refused before any I/O, where the recorder attached
    // its handler a setImmediate later.
    const dist = (path: string) => JSON.stringify(pathToFileURL(resolve('dist', path)).href);
    const script = `
      const { BrokerConnection } = await import(${dist('libs/broker/index.js')});
      const { DeliveryRecorder } = await import(${dist('libs/delivery-log/index.js')});
      const { DeliveryLogRecorder, openPostgres } = await import(${dist('libs/delivery-store/index.js')});
      const { silentLogger } = await import(${dist('libs/logger/index.js')});
      const { RABBITMQ_URL, DATABASE_URL, PREFIX, RECORDS } = process.env;
      const broker = new BrokerConnection({ url: RABBITMQ_URL, name: 'refused-at-once', logger: silentLogger() });
      await broker.open();
      const database = openPostgres(DATABASE_URL);
      let refuse = false;
      const session = database.session.bind(database);
      database.session = async () => {
        const real = await session();
        const query = (text, params) => (refuse ? ((refuse = false), Promise.reject(new Error('refused at once'))) : real.query(text, params));
        return Object.assign(Object.create(real), { query });
      };
      const recorder = new DeliveryLogRecorder(broker, database, silentLogger(), { prefix: PREFIX, retentionMs: 30 * 86_400_000, retryMs: 100 });
      const writer = new DeliveryRecorder(broker, silentLogger(), { prefix: PREFIX });
      await recorder.start();
      await writer.start();
      const until = async (ok) => { for (const end = Date.now() + 15_000; !ok() && Date.now() < end; ) await new Promise((r) => setTimeout(r, 20)); };
      await until(() => recorder.state.leading);
      refuse = true;
      await Promise.all(JSON.parse(RECORDS).map((r) => writer.record(r)));
      await until(() => recorder.state.recordsStored >= 4);
      console.log(JSON.stringify({ refused: !refuse, stored: recorder.state.recordsStored }));
      await writer.stop();
      await recorder.stop();
      await database.close();
      await broker.close();
    `;
    const result = await runProgram('--input-type=module', { ...env(), PREFIX: prefix, RECORDS: JSON.stringify(recordsOf('m_refused', 1)) }, ['-e', script]);
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual({ refused: true, stored: 4 });
    expect(result.code).toBe(0);
  });

  it('answers 503 in the envelope while PostgreSQL is unreachable, and says so in /readyz', async () => {
    expect(server).toBeDefined(); // this file's own PostgreSQL, to crash
    const merchant = testMerchant('m_outage', 'https://outage.example/hooks');
    const api = await startTestApi(prefix, [merchant], {}, { DATABASE_URL: db.url, DELIVERY_LOG: 'on' });
    try {
      await server!.crash();
      await waitFor('the API seeing PostgreSQL down', async () => ((await call(api, '/readyz', { method: 'GET' })).body as { database: string }).database === 'unreachable', 15_000, 100);
      const headers = { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` };
      for (const path of ['/nucleus/webhooks', '/nucleus/webhooks/wh_1', '/nucleus/events']) {
        const answer = await call(api, path, { method: 'GET', headers });
        expect(answer.status).toBe(503);
        expect(answer.body).toMatchObject({ error: { code: 'log_unavailable', status: 503 }, data: null });
        expect(answer.headers.get('retry-after')).toBe('5');
      }
      const ready = await call(api, '/readyz', { method: 'GET' });
      // Resends need PostgreSQL too: a load balancer takes this replica out until it is back.
      expect(ready).toMatchObject({ status: 503, body: { status: 'not ready', broker: 'connected', database: 'unreachable', deliveryLog: { database: 'unreachable' } } });
    } finally {
      await server?.up();
      await api.stop();
    }
  });

  it('counts the log as further behind the whole time PostgreSQL is down, where the figure stood still (the alert on it never fired)', async () => {
    expect(server).toBeDefined(); // this file's own PostgreSQL, to crash
    const merchant = testMerchant('m_behind', 'https://behind.example/hooks');
    const api = await startTestApi(prefix, [merchant], {}, { DATABASE_URL: db.url, DELIVERY_LOG: 'on' });
    type Ready = { database: string; deliveryLog: { database: string; behindSeconds: number | null } };
    const readyz = async () => (await call(api, '/readyz', { method: 'GET' })).body as Ready;
    try {
      // The tests above left the log caught up to some time: the API has seen it.
      await waitFor('the API seeing how far behind the log is', async () => (await readyz()).deliveryLog.behindSeconds !== null, 10_000, 100);
      await server!.crash();
      const down = await waitFor('the API seeing PostgreSQL down', async () => {
        const body = await readyz();
        return body.database === 'unreachable' && body.deliveryLog.database === 'unreachable' && body.deliveryLog.behindSeconds !== null && body.deliveryLog.behindSeconds;
      }, 15_000, 100);
      await waitFor('the figure growing while it is down', async () => ((await readyz()).deliveryLog.behindSeconds ?? 0) >= down + 3, 10_000, 200);
      const metrics = String((await call(api, '/metrics', { method: 'GET' })).body);
      expect(Number(/^webhooks_delivery_log_behind_seconds\{program="api"\} (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(down + 3);
    } finally {
      await server?.up();
      await api.stop();
    }
  });
});
