/**
 * A dispatcher's memory under a dead merchant (issue 45): one merchant answering 503 to everything
 * receives `rate` events/s for `seconds`, one dispatcher as deployed (merchants and the delivery
 * log in PostgreSQL, a recorder beside it, the retry safety net on) at the default schedule, so
 * its webhooks pile up in the retry tiers. Resident memory (VmRSS) and V8's heap are sampled every
 * 15 s beside the webhooks waiting (events published less those the log says are done); growth per
 * added wait is taken from minute 1 to the end. Then a second dispatcher starts with all of them
 * waiting: its start-up is from the process's start to /readyz 200.
 */
import { randomBytes } from 'node:crypto';
import { BrokerConnection } from '../libs/broker/index.js';
import { openPostgres } from '../libs/delivery-store/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { SecretBox } from '../libs/merchants/index.js';
import { columnsOf } from '../libs/merchants/rows.js';
import { declareIntake, topologyNames } from '../libs/topology/index.js';
import { benchPrefix, databaseProgramEnv, deleteTopology, eventBody, publishPaced, withDatabase } from './fixtures.js';
import { freePort, type ProgramProcess, rssOf, scrape, startProgram, startReceiver, until } from './processes.js';

export interface DeadMerchantSample {
  second: number;
  rssMb: number;
  heapMb: number;
  waiting: number;
}

export interface DeadMerchantResult {
  rate: number;
  seconds: number;
  samples: DeadMerchantSample[];
  /** (RSS at the end − RSS at minute 1) ÷ (waits at the end − waits at minute 1), bytes. */
  rssBytesPerWait: number;
  heapBytesPerWait: number;
  /** A second dispatcher with every one of them waiting: process start to /readyz 200. */
  startupMs: number;
  startupWaiting: number;
}

const KEY = randomBytes(32);
const TIERS = 7;

/** With `dist` (an earlier commit's build, absolute), its programs instead of this build's: a before and after. */
export function benchDeadMerchant(url: string, rate: number, seconds: number, dist?: string): Promise<DeadMerchantResult> {
  return withDatabase('dead', (databaseUrl) => run(url, rate, seconds, databaseUrl, (program) => (dist ? `${dist}/apps/${program}` : program)));
}

async function run(url: string, rate: number, seconds: number, databaseUrl: string, script: (program: string) => string): Promise<DeadMerchantResult> {
  const database = openPostgres(databaseUrl, { statementTimeoutMs: 600_000 });
  const receiver = await startReceiver();
  const prefix = benchPrefix('dead-merchant');
  const broker = new BrokerConnection({ url, name: 'bench-dead-merchant', logger: silentLogger() });
  const programs: ProgramProcess[] = [];
  try {
    const [publicKey, webhook, sealed] = columnsOf(
      { id: 'm_dead', publicKey: `pk_live_${randomBytes(12).toString('hex')}`, webhook: { url: `${receiver.url}/dead/0`, enabled: true, secret: `whsec_${randomBytes(24).toString('base64')}`, secretIssuedAt: new Date().toISOString() } } as never,
      new SecretBox(KEY),
    );
    await database.query('INSERT INTO merchants (id, public_key, webhook, secrets, version) VALUES ($1, $2, $3::jsonb, $4, 1)', ['m_dead', publicKey, webhook, sealed]);
    await broker.open();
    const channel = await broker.createChannel();
    await declareIntake(channel, prefix);
    await channel.close();
    const env = (port: number) => ({ ...databaseProgramEnv(url, prefix, databaseUrl, KEY, port), ALLOW_PRIVATE_TARGETS: 'true', LOG_LEVEL: 'warn' });
    programs.push(startProgram(script('recorder/main.js'), { ...env(await freePort()) }));
    const port = await freePort();
    const dispatcher = startProgram(script('dispatcher/main.js'), env(port));
    programs.push(dispatcher);
    await until('dispatcher ready', async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200, 60_000, 50);
    const done = async () => Number((await database.query<{ n: string }>(`SELECT count(*) AS n FROM delivery_webhooks WHERE status <> 'retrying'`)).rows[0]?.n ?? 0);
    const samples: DeadMerchantSample[] = [];
    const sample = async (second: number, published: number) => {
      samples.push({
        second,
        rssMb: Math.round(rssOf(dispatcher.child.pid!).nowMb * 10) / 10,
        heapMb: Math.round(((await scrape(port, 'nodejs_heap_size_used_bytes')) ?? NaN) / 2 ** 20 * 10) / 10,
        waiting: published - (await done()),
      });
    };
    const { events } = topologyNames(prefix);
    let published = 0;
    await publishPaced(
      rate,
      seconds,
      (i) => {
        published++;
        return broker.publish(events, 'payout', eventBody('m_dead'), { persistent: true, contentType: 'application/json', messageId: `evt_dead_${i}` });
      },
      (second) => sample(second, published),
    );
    const first = samples.reduce((best, s) => (Math.abs(s.second - 60) < Math.abs(best.second - 60) ? s : best));
    const last = samples.at(-1)!;
    const added = Math.max(1, last.waiting - first.waiting);
    // A second dispatcher, everything still waiting.
    const secondPort = await freePort();
    const startedAt = Date.now();
    const second = startProgram(script('dispatcher/main.js'), env(secondPort));
    programs.push(second);
    await until('second dispatcher ready', async () => (await fetch(`http://127.0.0.1:${secondPort}/readyz`).catch(() => undefined))?.status === 200, 60_000, 10);
    const startupMs = Date.now() - startedAt;
    return {
      rate,
      seconds,
      samples,
      rssBytesPerWait: Math.round(((last.rssMb - first.rssMb) * 2 ** 20) / added),
      heapBytesPerWait: Math.round(((last.heapMb - first.heapMb) * 2 ** 20) / added),
      startupMs,
      startupWaiting: last.waiting,
    };
  } finally {
    for (const program of programs.reverse()) await program.stop();
    await broker.close().catch(() => {});
    await receiver.stop();
    await deleteTopology(url, prefix, TIERS);
    await database.close();
  }
}
