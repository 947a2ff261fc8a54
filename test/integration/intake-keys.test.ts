import pg from 'pg';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { ensurePartition } from '../../libs/delivery-store/schema.js';
import { IntakeChecker, IntakeKeyStore } from '../../libs/intake-keys/index.js';
import { capturingLogger } from '../support/capturing-logger.js';
import { waitFor } from '../support/wait.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/**
 * The intake keys' table (libs/intake-keys/store.ts) on the real PostgreSQL: a key is a repeat only
 * within the window, keys expire by dropping day partitions, and two dispatchers checking one key
 * at once make one first sight. Each test was seen failing on a broken variant (see the report of
 * the change that added them).
 */
const DAY_MS = 86_400_000;
const HOUR_MS = 3_600_000;
const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);

describe('intake keys', () => {
  let database: TestDatabase;
  let db: Database;
  let other: Database;

  beforeAll(async () => {
    database = await createTestDatabase('intake_keys');
    db = openPostgres(database.url, { maxConnections: 2 });
    other = openPostgres(database.url, { maxConnections: 2 });
  });

  afterAll(async () => {
    await db?.close();
    await other?.close();
    await database?.drop();
  });

  const first = async (store: IntakeKeyStore, webhookId: string) => !(await store.check([{ merchantId: 'm_keys', webhookId }])).repeats.has(0);

  it('takes a key seen longer ago than the window for a first sight, and expires keys by dropping whole day partitions', async () => {
    const store = new IntakeKeyStore(db, DAY_MS);
    await store.maintain();
    const now = Date.now();
    // A key seen 25 h ago (yesterday's partition), one seen 3 days ago (its partition past the window).
    for (const [ago, webhookId] of [[25 * HOUR_MS, 'evt_25h'], [3 * DAY_MS, 'evt_3d']] as const) {
      await ensurePartition(db, 'intake_keys', day(now - ago));
      await db.query(
        `INSERT INTO intake_keys (day, merchant_id, webhook_id, first_seen_at)
         VALUES (date_trunc('day', now() - $1::float8 * interval '1 millisecond', 'UTC'), 'm_keys', $2, now() - $1::float8 * interval '1 millisecond')`,
        [ago, webhookId],
      );
    }
    expect(await first(store, 'evt_25h')).toBe(true);
    expect(await first(store, 'evt_fresh')).toBe(true);
    expect(await first(store, 'evt_fresh')).toBe(false);

    const { dropped } = await store.maintain();
    // A partition goes once its whole day is past the window (its end at or before now - 24 h), so
    // yesterday's stays (a key first seen late yesterday is still within it); 25 h ago is
    // yesterday's, or the day before's between 00:00 and 01:00 UTC.
    const name = (ms: number) => `intake_keys_${day(ms).replaceAll('-', '')}`;
    const kept = (ms: number) => Date.parse(`${day(ms)}T00:00:00Z`) + DAY_MS > now - DAY_MS;
    const made = [now - 3 * DAY_MS, now - 25 * HOUR_MS, now, now + DAY_MS];
    expect(dropped.sort()).toEqual(made.filter((ms) => !kept(ms)).map(name).sort());
    const partitions = await database.query<{ name: string }>(
      "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'intake_keys' ORDER BY 1",
    );
    expect(partitions.map((p) => p.name)).toEqual([...new Set(made.filter(kept).map(name))].sort());
    expect(dropped).toContain(name(now - 3 * DAY_MS));
  });

  it('takes over a row of the same day that is past a window under a day', async () => {
    const store = new IntakeKeyStore(db, 60_000);
    await store.maintain();
    expect(await first(store, 'evt_minute')).toBe(true);
    expect(await first(store, 'evt_minute')).toBe(false);
    await db.query("UPDATE intake_keys SET first_seen_at = now() - interval '2 minutes' WHERE webhook_id = 'evt_minute'");
    expect(await first(store, 'evt_minute')).toBe(true);
  });

  it("tells a repeat whose body differs from its original's, today's or an earlier day's, but not one of a key a release before took (no digest)", async () => {
    const store = new IntakeKeyStore(db, DAY_MS);
    await store.maintain();
    const digest = (n: number) => Buffer.alloc(16, n);
    const changed = async (webhookId: string, n: number) => {
      const states = await store.check([{ merchantId: 'm_keys', webhookId, digest: digest(n) }]);
      return states.repeats.has(0) ? states.changed.has(0) : 'first';
    };
    expect(await changed('evt_digest', 1)).toBe('first');
    expect(await changed('evt_digest', 1)).toBe(false);
    expect(await changed('evt_digest', 2)).toBe(true);
    // First seen 23 h ago: in yesterday's partition (today's after 23:00 UTC).
    const ago = 23 * HOUR_MS;
    await ensurePartition(db, 'intake_keys', day(Date.now() - ago));
    await db.query(
      `INSERT INTO intake_keys (day, merchant_id, webhook_id, first_seen_at, body_digest)
       VALUES (date_trunc('day', now() - $1::float8 * interval '1 millisecond', 'UTC'), 'm_keys', 'evt_digest_earlier', now() - $1::float8 * interval '1 millisecond', $2)`,
      [ago, digest(1)],
    );
    expect(await changed('evt_digest_earlier', 2)).toBe(true);
    // Taken by a dispatcher of the release before (0024's signature): no digest to compare.
    await db.query("SELECT intake_check(ARRAY['m_keys'], ARRAY['evt_digest_old'], $1::float8, '{}', '{}')", [DAY_MS]);
    expect(await changed('evt_digest_old', 2)).toBe(false);
  });

  it("never takes one merchant's messageId for another's repeat, nor counts a repeat on the other's row", async () => {
    const store = new IntakeKeyStore(db, DAY_MS);
    await store.maintain();
    const sight = async (merchantId: string) => ((await store.check([{ merchantId, webhookId: 'evt_two_merchants' }])).repeats.has(0) ? 'repeat' : 'first');
    expect([await sight('m_one'), await sight('m_two'), await sight('m_two')]).toEqual(['first', 'first', 'repeat']);
    await store.check([], [{ merchantId: 'm_two', webhookId: 'evt_two_merchants' }]);
    const rows = await database.query<{ merchant_id: string; duplicates: number }>("SELECT merchant_id, duplicates FROM intake_keys WHERE webhook_id = 'evt_two_merchants' ORDER BY 1");
    expect(rows).toEqual([{ merchant_id: 'm_one', duplicates: 0 }, { merchant_id: 'm_two', duplicates: 1 }]);
  });

  it('makes one first sight of a key two dispatchers check at the same moment', async () => {
    const a = new IntakeKeyStore(db, DAY_MS);
    const b = new IntakeKeyStore(other, DAY_MS);
    await a.maintain();
    for (let i = 0; i < 20; i++) {
      const webhookId = `evt_race_${i}`;
      const results = await Promise.all([first(a, webhookId), first(b, webhookId)]);
      expect(results.sort()).toEqual([false, true]);
    }
  });

  /** A transaction of the test's that holds rows the checks need until `end`: a check locks some rows and waits there. */
  const holding = async (statement: string) => {
    const holder = new pg.Client({ connectionString: database.url });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query(statement);
    return async (how: 'COMMIT' | 'ROLLBACK') => {
      await holder.query(how);
      await holder.end();
    };
  };
  const waiting = (n: number) =>
    waitFor(`${n} checks waiting for a lock`, async () =>
      (await database.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"))[0]!.n === n, 10_000);

  it('locks the keys of two checks in one order: two batches of the same keys in crossed orders do not deadlock', async () => {
    // Seen failing (40P01, deadlock detected) with the keys sent in the batch's order, as before the fix.
    const a = new IntakeKeyStore(db, DAY_MS);
    const b = new IntakeKeyStore(other, DAY_MS);
    await a.maintain();
    const key = (webhookId: string) => ({ merchantId: 'm_keys', webhookId });
    const end = await holding("INSERT INTO intake_keys (day, merchant_id, webhook_id) VALUES (date_trunc('day', now(), 'UTC'), 'm_keys', 'evt_cross_m')");
    const checks = [
      a.check([key('evt_cross_b'), key('evt_cross_m'), key('evt_cross_a')]),
      b.check([key('evt_cross_a'), key('evt_cross_m'), key('evt_cross_b')]),
    ];
    await waiting(2);
    await end('ROLLBACK');
    const states = await Promise.all(checks);
    // One took the three keys, the other found them.
    expect(states.map((s) => [...s.repeats].sort()).sort()).toEqual([[], [0, 1, 2]]);
  });

  it("counts repeats apart from a check: a check never holds its keys' rows while it waits for a noted row", async () => {
    // Seen failing (40P01, deadlock detected) with 0028's count in the check's statement, as before the fix.
    const a = new IntakeKeyStore(db, DAY_MS);
    const b = new IntakeKeyStore(other, DAY_MS);
    await a.maintain();
    const k = { merchantId: 'm_keys', webhookId: 'evt_noted_k' };
    const j = { merchantId: 'm_keys', webhookId: 'evt_noted_j' };
    await a.check([k, j]);
    // Each check finds a repeat and counts a repeat of the other's. Held apart, their rows are let go
    // one after the other: before the fix the first check locked k and waited for j, behind the second.
    const endK = await holding("SELECT 1 FROM intake_keys WHERE webhook_id = 'evt_noted_k' FOR UPDATE");
    const endJ = await holding("SELECT 1 FROM intake_keys WHERE webhook_id = 'evt_noted_j' FOR UPDATE");
    const checks = [a.check([k], [j]), b.check([j], [k])];
    await waiting(2);
    await endK('COMMIT');
    await waiting(2);
    await endJ('COMMIT');
    const states = await Promise.all(checks);
    expect(states.map((s) => [...s.repeats])).toEqual([[0], [0]]);
    const rows = await database.query("SELECT webhook_id, duplicates FROM intake_keys WHERE webhook_id LIKE 'evt_noted_%' ORDER BY 1");
    expect(rows).toEqual([{ webhook_id: 'evt_noted_j', duplicates: 1 }, { webhook_id: 'evt_noted_k', duplicates: 1 }]);
  });

  it('tries a check again at once when PostgreSQL aborts it for a deadlock with another transaction, and goes on checking', async () => {
    // Seen failing ('unchecked' for both, then for the next check: its rest) on the checker that rested on any error, as before the fix.
    const keysDb = openPostgres(database.url, { statementTimeoutMs: 5_000, maxConnections: 2 });
    const lines: Array<Record<string, unknown>> = [];
    const checker = new IntakeChecker(new IntakeKeyStore(keysDb, DAY_MS), capturingLogger(lines), { timeoutMs: 15_000 });
    const outside = new pg.Client({ connectionString: database.url });
    await outside.connect();
    try {
      await checker.start();
      const insert = (webhookId: string) => outside.query("INSERT INTO intake_keys (day, merchant_id, webhook_id) VALUES (date_trunc('day', now(), 'UTC'), 'm_keys', $1)", [webhookId]);
      await outside.query('BEGIN');
      await insert('evt_deadlock_b');
      // The check takes a and waits for b; then the outside transaction waits for a. PostgreSQL
      // aborts the check (its deadlock_timeout, 1 s, runs out first: it has waited half of it already),
      // and the outside one takes a.
      const sights = Promise.all([checker.check({ merchantId: 'm_keys', webhookId: 'evt_deadlock_a' }, false), checker.check({ merchantId: 'm_keys', webhookId: 'evt_deadlock_b' }, false)]);
      await waitFor('the check waiting for b half a second', async () => (await database.query("SELECT 1 FROM pg_locks WHERE NOT granted AND waitstart < now() - interval '500 ms'")).length === 1, 10_000);
      await insert('evt_deadlock_a');
      // Tried again, the check waits for the outside transaction, which gives both keys up (before the
      // fix it was not: nothing waited, and both messages had gone on 'unchecked').
      await waiting(1);
      await outside.query('ROLLBACK');
      expect(await sights).toEqual(['first', 'first']);
      expect(await checker.check({ merchantId: 'm_keys', webhookId: 'evt_deadlock_a' }, false)).toBe('repeat');
      expect(lines.filter((line) => /intake check skipped/.test(String(line.message)))).toEqual([]);
    } finally {
      await outside.query('ROLLBACK').catch(() => {});
      await outside.end();
      checker.stop();
      await keysDb.close();
    }
  }, 30_000);

  it("makes today's partition when a check finds none, and checks again at once", async () => {
    // Seen failing ('unchecked', then 'unchecked' again: its rest) on the checker that rested and made the partition after, as before the fix.
    const keysDb = openPostgres(database.url, { statementTimeoutMs: 5_000, maxConnections: 2 });
    const lines: Array<Record<string, unknown>> = [];
    const checker = new IntakeChecker(new IntakeKeyStore(keysDb, DAY_MS), capturingLogger(lines), { timeoutMs: 15_000 });
    try {
      const { today } = (await database.query<{ today: string }>("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') AS today"))[0]!;
      await database.query(`DROP TABLE IF EXISTS intake_keys_${today}`);
      expect(await checker.check({ merchantId: 'm_keys', webhookId: 'evt_no_partition' }, false)).toBe('first');
      expect(await checker.check({ merchantId: 'm_keys', webhookId: 'evt_no_partition' }, false)).toBe('repeat');
      expect(lines.filter((line) => /intake check skipped/.test(String(line.message)))).toEqual([]);
    } finally {
      checker.stop();
      await keysDb.close();
    }
  }, 30_000);

  it("checks on in time while a long read holds the table (pg_dump, an export) and a new day's partition is due: the upkeep gives way", async () => {
    // The dispatcher's pool for keys (apps/dispatcher/program.ts): two connections, a 5 s statement timeout.
    const keysDb = openPostgres(database.url, { statementTimeoutMs: 5_000, maxConnections: 2 });
    const lines: Array<Record<string, unknown>> = [];
    const checker = new IntakeChecker(new IntakeKeyStore(keysDb, DAY_MS), capturingLogger(lines));
    const reader = new pg.Client({ connectionString: database.url });
    await reader.connect();
    let upkeep: Promise<void> | undefined;
    try {
      await checker.start();
      // A new day: tomorrow's partition is not made yet.
      const { tomorrow } = (await database.query<{ tomorrow: string }>("SELECT to_char(now() AT TIME ZONE 'UTC' + interval '1 day', 'YYYYMMDD') AS tomorrow"))[0]!;
      await database.query(`DROP TABLE intake_keys_${tomorrow}`);
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM intake_keys');
      // The hourly upkeep comes round while the read lasts.
      upkeep = (checker as unknown as { maintain(): Promise<void> }).maintain();
      // Checks come meanwhile, as messages do; the upkeep (waiting for the read) may have given way already.
      await waitFor('the upkeep waiting for the read, or given way', async () =>
        (await database.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'CREATE TABLE%'")).length === 1 ||
        lines.some((line) => /not kept up/.test(String(line.message))), 5_000);
      expect(await checker.check({ merchantId: 'm_keys', webhookId: 'evt_during_read' }, false)).toBe('first');
      expect(await checker.check({ merchantId: 'm_keys', webhookId: 'evt_during_read' }, false)).toBe('repeat');
      expect(lines.filter((line) => /intake check skipped/.test(String(line.message)))).toEqual([]);
      await reader.query('COMMIT');
      await upkeep;
      // The read over, the next upkeep makes it.
      await (checker as unknown as { maintain(): Promise<void> }).maintain();
      await waitFor("tomorrow's partition made", async () => (await database.query('SELECT 1 FROM pg_class WHERE relname = $1', [`intake_keys_${tomorrow}`])).length === 1, 5_000);
    } finally {
      await reader.query('ROLLBACK').catch(() => {});
      await reader.end();
      checker.stop();
      await upkeep?.catch(() => {});
      await keysDb.close();
    }
  }, 30_000);

  it('lets a check queued behind two hung statements go on unchecked at their deadline, not after a statement of its own', async () => {
    // The dispatcher's pool for keys (apps/dispatcher/program.ts): two connections, a 5 s statement timeout.
    const keysDb = openPostgres(database.url, { statementTimeoutMs: 5_000, maxConnections: 2 });
    const timeoutMs = 1_500;
    const checker = new IntakeChecker(new IntakeKeyStore(keysDb, DAY_MS), capturingLogger([]), { timeoutMs });
    const locker = new pg.Client({ connectionString: database.url });
    await locker.connect();
    try {
      await checker.start();
      // PostgreSQL hangs every check (a lock held, a stalled disk): no statement answers.
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE intake_keys IN ACCESS EXCLUSIVE MODE');
      const check = async (webhookId: string) => {
        const started = performance.now();
        const sight = await checker.check({ merchantId: 'm_keys', webhookId }, false);
        return { sight, ms: performance.now() - started };
      };
      const next = () => new Promise((resolve) => setImmediate(resolve));
      // Two statements at once (the most a checker runs), each its own turn; the third is queued behind them.
      const a = check('evt_hung_a');
      await next();
      const b = check('evt_hung_b');
      await next();
      const c = check('evt_hung_c');
      const answers = await Promise.all([a, b, c]);
      expect(answers.map(({ sight }) => sight)).toEqual(['unchecked', 'unchecked', 'unchecked']);
      // Its wait is the first statements' deadline; a statement of its own after them doubled it.
      expect(answers[2]!.ms).toBeLessThan(timeoutMs * 1.6);
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      await locker.end();
      checker.stop();
      await keysDb.close();
    }
  }, 30_000);

  it('keeps one generic plan of the check for the session, without sequential scans (0015)', async () => {
    // Re-planned on every call, a check cost PostgreSQL ~550 µs a statement against ~220 µs (BENCHMARKS.md section 20).
    // Both signatures: 0024's, which the release before calls while the roll reaches it, and 0028's.
    const { rows } = await db.query<{ config: string[] }>("SELECT proconfig AS config FROM pg_proc WHERE proname = 'intake_check'");
    expect(rows).toHaveLength(2);
    for (const { config } of rows) expect(config).toEqual(expect.arrayContaining(['plan_cache_mode=force_generic_plan', 'enable_seqscan=off']));
  });
});
