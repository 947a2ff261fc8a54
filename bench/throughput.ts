/**
 * Scenario 1: dispatch throughput for N events to a fast local receiver, beside the raw limits
 * measured in the same run with the same receiver and concurrency: the broker alone (consume +
 * ack, no HTTP) and the HTTP client alone (undici, the dispatcher's client).
 */
import amqp from 'amqplib';
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { Database } from '../libs/delivery-store/index.js';
import { brokerPid, coresDuring } from './cpu.js';
import { type BenchMerchant, benchMerchants, benchPrefix, deleteTopology, fillDispatch, SECRET, withDatabase } from './fixtures.js';
import { type ProgramProcess, type ReceiverProcess, startProgram, until } from './processes.js';

/** A raw client's rate, measured in a fresh process, with the cores it and the receiver used. */
export async function rawClient(receiver: ReceiverProcess, total: number, concurrency: number) {
  const child = fork(fileURLToPath(new URL('./raw-client-process.js', import.meta.url)), [receiver.url, String(total), String(concurrency)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const measured = await coresDuring({ client: child.pid, receiver: receiver.pid }, async () => ((await once(child, 'message')) as [number])[0]);
  await once(child, 'exit');
  return { rate: measured.result, cores: measured.cores };
}

/** The broker's own limit for this work: deliveries consumed and acked with the same prefetch. */
export async function rawBroker(url: string, total: number, concurrency: number): Promise<number> {
  const prefix = benchPrefix('broker');
  await fillDispatch(url, prefix, total, () => 'm_bench');
  const connection = await amqp.connect(url, { noDelay: true });
  const channel = await connection.createChannel();
  await channel.prefetch(concurrency);
  let received = 0;
  let first = 0;
  let last = 0;
  await channel.consume(`${prefix}.dispatch`, (msg) => {
    if (!msg) return;
    if (!first) first = performance.now();
    JSON.parse(msg.content.toString('utf8'));
    channel.ack(msg);
    received++;
    last = performance.now();
  });
  await until('broker-only consume', () => received >= total, 120_000, 10);
  await connection.close();
  await deleteTopology(url, prefix);
  return total / ((last - first) / 1000);
}

/** The dispatcher's rate, with the cores it, the receiver and RabbitMQ used while delivering. */
export async function dispatcherThroughputCores(url: string, receiver: ReceiverProcess, total: number, concurrency: number): Promise<{ rate: number; cores: Record<string, number> }> {
  // As deployed: a retry schedule, so a database for its waits (made before the clock starts).
  return withDatabase('throughput', async (databaseUrl) => {
    const prefix = benchPrefix('throughput');
    await fillDispatch(url, prefix, total, () => 'm_bench');
    await receiver.reset();
    const program = await startBenchDispatcher(url, prefix, receiver, concurrency, databaseUrl);
    let cores: Record<string, number> = {};
    try {
      await until('first delivery', async () => (await receiver.stats()).count > 0, 30_000, 10);
      ({ cores } = await coresDuring({ dispatcher: program.child.pid, receiver: receiver.pid, broker: brokerPid() }, () =>
        until('all deliveries', async () => (await receiver.stats()).count >= total, 180_000, 50),
      ));
    } finally {
      await program.stop();
    }
    const stats = await receiver.stats();
    await deleteTopology(url, prefix);
    return { rate: total / ((stats.last - stats.first) / 1000), cores };
  });
}

/** One window of deliveries: its rate, and the CPU µs per delivery of the process that made them. */
export interface CpuWindow {
  rate: number;
  cpuUs: number;
  /** Of cpuUs: the main thread (the event loop, the program's own code) and the other threads (V8's compiler and GC helpers). */
  mainUs: number;
  othersUs: number;
}

/**
 * CPU time of `pid` per delivery the receiver counted, from /proc, in two windows: `cold`, the
 * first `warmup` deliveries of a fresh process (V8 still compiling its hot code), and `warm`, the
 * `total` after them, what a long-running process pays. The receiver reads /proc at the receipt
 * of exactly those counts, so neither window depends on when the bench polls. CPU time, unlike a
 * rate, holds when other processes share the machine.
 */
export async function cpuWindows(pid: number | undefined, receiver: ReceiverProcess, warmup: number, total: number, waitFor = warmup + total): Promise<{ cold: CpuWindow; warm: CpuWindow }> {
  if (!pid) throw new Error('bench: no process to measure');
  await receiver.watch(pid, [1, warmup, warmup + total]);
  // `waitFor` beyond the window: deliveries still to come after it (retries), waited for too.
  await until('all deliveries', async () => (await receiver.count()).count >= waitFor, 300_000, 50);
  const { marks } = await receiver.count();
  const window = (from: number, to: number): CpuWindow => {
    const a = marks[from]!;
    const b = marks[to]!;
    const deliveries = b.count - a.count;
    const mainUs = ((b.main - a.main) * 1e6) / deliveries;
    const othersUs = ((b.others - a.others) * 1e6) / deliveries;
    return { rate: deliveries / ((b.at - a.at) / 1000), cpuUs: mainUs + othersUs, mainUs, othersUs };
  };
  if (marks.length < 3) throw new Error(`bench: the receiver marked ${marks.length} of 3 counts`);
  return { cold: window(0, 1), warm: window(1, 2) };
}

/** The reference pipeline (bench/reference-pipeline.ts) in its own process: its rate and CPU µs per delivery, cold and warm. */
export async function referenceThroughput(url: string, receiver: ReceiverProcess, warmup: number, total: number, prefetch: number, inFlight: number) {
  const prefix = benchPrefix('reference');
  await fillDispatch(url, prefix, warmup + total, () => 'm_bench');
  await receiver.reset();
  const args = process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir=profiles'] : [];
  const child = fork(
    fileURLToPath(new URL('./reference-pipeline.js', import.meta.url)),
    [url, `${prefix}.dispatch`, receiver.url, String(warmup + total), String(prefetch), String(inFlight), SECRET],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv: args },
  );
  try {
    const exited = once(child, 'exit');
    const windows = await cpuWindows(child.pid, receiver, warmup, total);
    // It waits to be told, so that /proc still held it when its CPU time was read.
    child.send('exit');
    await Promise.race([exited, new Promise((_, reject) => setTimeout(() => reject(new Error('bench: the reference pipeline did not exit')), 30_000).unref())]);
    return windows;
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
    await deleteTopology(url, prefix);
  }
}

/**
 * A dispatcher on `prefix`'s queues delivering one merchant's events to `receiver`, with `env`
 * added; `script` runs another build's (an absolute path to its main.js, for A/B against the
 * build before). Its merchants (`m_bench` at the receiver's /ok unless given) are written into the
 * database at `databaseUrl` first, where its waits are rows too.
 */
export async function startBenchDispatcher(
  url: string,
  prefix: string,
  receiver: ReceiverProcess,
  concurrency: number,
  databaseUrl: string,
  env: Record<string, string> = {},
  script = 'dispatcher/main.js',
  merchants: BenchMerchant[] = [{ id: 'm_bench', url: `${receiver.url}/ok` }],
): Promise<ProgramProcess> {
  const stored = await benchMerchants(databaseUrl, merchants);
  return startProgram(script, {
    RABBITMQ_URL: url,
    TOPOLOGY_PREFIX: prefix,
    ...stored,
    RETRY_SCHEDULE: '5s',
    DISPATCH_CONCURRENCY: String(concurrency),
    ALLOW_PRIVATE_TARGETS: 'true',
    METRICS_PORT: '0',
    LOG_LEVEL: 'warn',
    ...env,
  });
}

/**
 * The dispatcher as deployed (its own process, every guarantee on): its rate and CPU µs per
 * delivery, cold and warm. `upstream`: the events come through the events exchange (intake checks their keys);
 * `randomKeys` as fillDispatch's; `migrateWith` as withDatabase's (a migration and what a case seeds).
 */
export async function dispatcherCpu(
  url: string,
  receiver: ReceiverProcess,
  warmup: number,
  total: number,
  concurrency: number,
  env: Record<string, string> = {},
  options: { upstream?: boolean; randomKeys?: boolean; migrateWith?: (db: Database) => Promise<unknown>; merchants?: BenchMerchant[] } = {},
) {
  // As deployed: a retry schedule, so a migrated database of its own for the waits.
  return withDatabase('cpu', async (databaseUrl) => {
    const prefix = benchPrefix('throughput');
    await fillDispatch(url, prefix, warmup + total, () => 'm_bench', { upstream: options.upstream, randomKeys: options.randomKeys });
    await receiver.reset();
    const program = await startBenchDispatcher(url, prefix, receiver, concurrency, databaseUrl, env, undefined, options.merchants);
    try {
      return await cpuWindows(program.child.pid, receiver, warmup, total);
    } finally {
      await program.stop();
      await deleteTopology(url, prefix);
    }
  }, undefined, options.migrateWith);
}
