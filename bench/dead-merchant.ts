/**
 * A dead merchant costs rows, not broker churn (issue 54). One dispatcher as deployed (merchants
 * and its waits in PostgreSQL, the default schedule 5s,5m,30m,2h,5h,10h,10h) serves ten healthy
 * merchants at `okRate` events/s: first for `idleSeconds` with `deadRate` events/s more for an
 * eleventh merchant that answers (the idle run: the same traffic, no one dead), then, with `waits`
 * webhook_waits rows inserted straight into the table for one merchant whose URL
 * answers 503 (its waits due evenly over the next 30 minutes, as a merchant dead for hours has
 * them: each was postponed by the 30m step of a 10-minute circuit), and that merchant receiving
 * `deadRate` events/s on top, for `seconds`. The dispatcher's real path handles them: its first
 * attempts open the circuit, the waits that fall due are handed back or parked as its code does.
 * Measured: the healthy merchants' p50/p95 publish-to-receipt latency in both runs, `dispatch`'s
 * ready messages (max of a sample a second), the dead merchant's hand-backs and rewrites, the dispatcher's RSS
 * every 10 s beside the dead merchant's waits (growth per added wait from minute 1 to the end),
 * and a second dispatcher's start with all of them waiting (process start to /readyz 200).
 */
import { randomBytes } from 'node:crypto';
import { BrokerConnection } from '../libs/broker/index.js';
import { HEADERS } from '../libs/contracts/index.js';
import { openPostgres } from '../libs/delivery-store/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { SecretBox } from '../libs/merchants/index.js';
import { columnsOf } from '../libs/merchants/rows.js';
import { type Merchant, newEndpointId } from '../libs/merchants/index.js';
import { declareIntake, topologyNames } from '../libs/topology/index.js';
import { benchPrefix, databaseProgramEnv, deleteTopology, eventBody, withDatabase } from './fixtures.js';
import { freePort, type ProgramProcess, rssOf, startProgram, startReceiver, until } from './processes.js';
import { percentile, round } from './stats.js';

export interface DeadMerchantSample {
  second: number;
  rssMb: number;
  /** The dead merchant's waits (rows). */
  waiting: number;
  /** Ready messages in dispatch. */
  dispatch: number;
}

export interface HealthyLatency {
  p50: number;
  p95: number;
  count: number;
}

export interface DeadMerchantResult {
  waits: number;
  insertS: number;
  idle: HealthyLatency;
  dead: HealthyLatency;
  dispatchMax: number;
  /** Hand-backs and rewrites of the dead merchant's waits during the dead run (the growth of their `hand`s). */
  handChanges: number;
  samples: DeadMerchantSample[];
  /** (RSS at the end − RSS at minute 1) ÷ (the dead merchant's waits at the end − at minute 1), bytes. */
  rssBytesPerWait: number;
  startupMs: number;
  startupWaiting: number;
}

export interface DeadMerchantOptions {
  waits: number;
  okRate: number;
  deadRate: number;
  idleSeconds: number;
  seconds: number;
  /** An earlier build's `dist` (absolute): its dispatcher instead of this build's. */
  dist?: string;
}

const KEY = randomBytes(32);
const HEALTHY = 10;

export async function benchDeadMerchant(url: string, options: DeadMerchantOptions): Promise<DeadMerchantResult> {
  // An earlier build refuses a schema newer than it knows: its own migrations make the database.
  const migrateWith = options.dist ? ((await import(`${options.dist}/libs/migrations/index.js`)) as { migrate: (db: unknown) => Promise<unknown> }).migrate : undefined;
  return withDatabase('dead', (databaseUrl) => run(url, databaseUrl, options), undefined, migrateWith);
}

async function run(url: string, databaseUrl: string, options: DeadMerchantOptions): Promise<DeadMerchantResult> {
  const script = (program: string) => (options.dist ? `${options.dist}/apps/${program}` : program);
  const database = openPostgres(databaseUrl, { statementTimeoutMs: 900_000 });
  const receiver = await startReceiver();
  const prefix = benchPrefix('dead-merchant');
  const broker = new BrokerConnection({ url, name: 'bench-dead-merchant', logger: silentLogger() });
  const programs: ProgramProcess[] = [];
  try {
    const box = new SecretBox(KEY);
    const merchant = async (id: string, path: string) => {
      const [publicKey, webhook, sealed] = columnsOf(
        { id, publicKey: `pk_live_${randomBytes(12).toString('hex')}`, endpoints: [{ id: newEndpointId(), url: `${receiver.url}${path}`, enabled: true, secret: `whsec_${randomBytes(24).toString('base64')}`, secretIssuedAt: new Date().toISOString() }] } as Merchant,
        box,
      );
      await database.query('INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3::jsonb, $4, 1)', [id, publicKey, webhook, sealed]);
    };
    await merchant('m_dead', '/dead/0');
    for (let i = 0; i < HEALTHY; i++) await merchant(`m_ok_${i}`, `/ok/${i}`);
    await merchant('m_spare', '/ok/spare');
    await broker.open();
    const setup = await broker.createChannel();
    await declareIntake(setup, prefix);
    await setup.close();
    const names = topologyNames(prefix);
    const env = (port: number) => ({ ...databaseProgramEnv(url, prefix, databaseUrl, KEY, port), ALLOW_PRIVATE_TARGETS: 'true', LOG_LEVEL: 'warn', DELIVERY_LOG: 'off' });
    const port = await freePort();
    const dispatcher = startProgram(script('dispatcher/main.js'), env(port));
    programs.push(dispatcher);
    await until('dispatcher ready', async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200, 60_000, 50);

    let sequence = 0;
    const publishFor = async (seconds: number, deadRate: number, tick: (second: number) => Promise<void>, deadTo = 'm_dead') => {
      const started = performance.now();
      const perTick = (options.okRate + deadRate) / 10;
      const confirms: Promise<void>[] = [];
      for (let t = 0; t < seconds * 10; t++) {
        const wait = started + t * 100 - performance.now();
        if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
        for (let k = 0; k < perTick; k++) {
          const i = sequence++;
          const dead = k < deadRate / 10;
          const to = dead ? deadTo : `m_ok_${i % HEALTHY}`;
          confirms.push(broker.publish(names.events, 'charge.completed', eventBody(to), { persistent: true, contentType: 'application/json', messageId: `evt_b${i}` }));
        }
        if (confirms.length >= 500) await Promise.all(confirms.splice(0));
        if (t % 10 === 0) await tick(t / 10);
      }
      await Promise.all(confirms);
    };
    const healthyLatency = async (): Promise<HealthyLatency> => {
      const stats = await receiver.stats();
      const values = Object.entries(stats.merchants).filter(([m]) => m.startsWith('m_ok_')).flatMap(([, v]) => v).sort((a, b) => a - b);
      return { p50: percentile(values, 50), p95: percentile(values, 95), count: values.length };
    };
    const healthyReceived = async () => Object.entries((await receiver.stats()).merchants).filter(([m]) => m.startsWith('m_ok_')).reduce((n, [, v]) => n + v.length, 0);

    // The idle run: the same traffic, the dead merchant's share going to a merchant that answers.
    await receiver.reset();
    const idleStart = sequence;
    await publishFor(options.idleSeconds, options.deadRate, async () => {}, 'm_spare');
    await until('idle deliveries', async () => (await receiver.count()).count >= sequence - idleStart, 120_000, 100);
    const idle = await healthyLatency();

    // The dead merchant's waits, inserted straight into the table (bodies once per webhook), with
    // the span column of 0006 where the build has it (the end of each one's schedule, a day on), in
    // the same statement: set by an UPDATE after it, the million rows stayed locked for as long as it
    // took (20 s to 2 min) while the dispatcher ran, and every wait write and take waited on it.
    const insertStarted = Date.now();
    const firstSeen = new Date(Date.now() - 3_600_000).toISOString();
    const spans = (await database.query(`SELECT 1 FROM information_schema.columns WHERE table_name = 'webhook_waits' AND column_name = 'span_ends_at'`)).rows.length > 0;
    await database.query(
      `WITH w AS (
         SELECT 'evt_dead_' || i AS webhook_id, now() + ((i::float8 / $1) * 1800) * interval '1 second' AS due_at FROM generate_series(0, $1 - 1) AS i
       ), bodies AS (
         INSERT INTO webhook_bodies (merchant_id, webhook_id, content) SELECT 'm_dead', webhook_id, $2::bytea FROM w
       )
       INSERT INTO webhook_waits (merchant_id, webhook_id, attempt, due_at, pick_at, reason, headers${spans ? ', span_ends_at' : ''})
       SELECT 'm_dead', webhook_id, 1, due_at, due_at, 'circuit-open',
         jsonb_build_object('${HEADERS.merchantId}', 'm_dead', '${HEADERS.event}', 'charge.completed', '${HEADERS.webhookId}', webhook_id,
           '${HEADERS.attempts}', 1, '${HEADERS.postponements}', 1, '${HEADERS.firstSeenAt}', $3::text)${spans ? ", now() + interval '1 day'" : ''}
       FROM w`,
      [options.waits, eventBody('m_dead'), firstSeen],
    );
    await database.query('ANALYZE webhook_waits');
    const insertS = (Date.now() - insertStarted) / 1000;

    // The dead run.
    await receiver.reset();
    const deadStart = sequence;
    const samples: DeadMerchantSample[] = [];
    let dispatchMax = 0;
    const depth = await broker.createChannel();
    const sampler = setInterval(() => {
      void depth.checkQueue(names.dispatch).then((q) => (dispatchMax = Math.max(dispatchMax, q.messageCount)), () => {});
    }, 1_000);
    // Counted by a trigger, as each hand change inserts a row: from 0033 a hand is drawn from a
    // sequence, and the sum of the hands (what releases before it counted up by one) counts nothing.
    await database.query('CREATE TABLE bench_hand_changes (merchant_id text NOT NULL)');
    await database.query(`CREATE FUNCTION bench_count_hand_change() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO bench_hand_changes VALUES (NEW.merchant_id); RETURN NULL; END $$`);
    await database.query(`CREATE TRIGGER bench_count_hand_change AFTER UPDATE ON webhook_waits FOR EACH ROW
      WHEN (OLD.hand IS DISTINCT FROM NEW.hand) EXECUTE FUNCTION bench_count_hand_change()`);
    const handCount = async () => Number((await database.query<{ n: string }>(`SELECT count(*) AS n FROM bench_hand_changes WHERE merchant_id = 'm_dead'`)).rows[0]!.n);
    const handsBefore = await handCount();
    const deadWaits = async () => Number((await database.query<{ n: string }>(`SELECT count(*) AS n FROM webhook_waits WHERE merchant_id = 'm_dead'`)).rows[0]!.n);
    await publishFor(options.seconds, options.deadRate, async (second) => {
      if (second % 10 !== 0) return;
      samples.push({ second, rssMb: round(rssOf(dispatcher.child.pid!).nowMb, 1), waiting: await deadWaits(), dispatch: dispatchMax });
    });
    const healthySent = Math.round(((sequence - deadStart) * options.okRate) / (options.okRate + options.deadRate));
    await until('healthy deliveries', async () => (await healthyReceived()) >= healthySent - 10, 180_000, 100);
    clearInterval(sampler);
    await depth.close().catch(() => {});
    const dead = await healthyLatency();
    const handChanges = (await handCount()) - handsBefore;
    samples.push({ second: options.seconds, rssMb: round(rssOf(dispatcher.child.pid!).nowMb, 1), waiting: await deadWaits(), dispatch: dispatchMax });
    const first = samples.reduce((best, s) => (Math.abs(s.second - 60) < Math.abs(best.second - 60) ? s : best));
    const last = samples.at(-1)!;
    const added = Math.max(1, last.waiting - first.waiting);

    // A second dispatcher, everything still waiting.
    const secondPort = await freePort();
    const startedAt = Date.now();
    programs.push(startProgram(script('dispatcher/main.js'), env(secondPort)));
    await until('second dispatcher ready', async () => (await fetch(`http://127.0.0.1:${secondPort}/readyz`).catch(() => undefined))?.status === 200, 60_000, 10);
    const startupMs = Date.now() - startedAt;
    return {
      waits: options.waits,
      insertS: round(insertS, 1),
      idle,
      dead,
      dispatchMax,
      handChanges,
      samples,
      rssBytesPerWait: Math.round(((last.rssMb - first.rssMb) * 2 ** 20) / added),
      startupMs,
      startupWaiting: last.waiting,
    };
  } finally {
    for (const program of programs.reverse()) await program.stop();
    await broker.close().catch(() => {});
    await receiver.stop();
    await deleteTopology(url, prefix);
    await database.close();
  }
}
