/**
 * Scenario 1: dispatch throughput for N events to a fast local receiver, beside the raw limits
 * measured in the same run with the same receiver and concurrency: the broker alone (consume +
 * ack, no HTTP) and the HTTP client alone (the dispatcher's got client, and undici for reference).
 */
import amqp from 'amqplib';
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { brokerPid, coresDuring, cpuSeconds } from './cpu.js';
import { benchPrefix, deleteTopology, fillDispatch, merchantsFile, SECRET } from './fixtures.js';
import { type ReceiverProcess, startProgram, until } from './processes.js';

/** A raw client's rate, measured in a fresh process, with the cores it and the receiver used. */
export async function rawClient(receiver: ReceiverProcess, total: number, concurrency: number, client: 'undici' | 'got') {
  const child = fork(fileURLToPath(new URL('./raw-client-process.js', import.meta.url)), [receiver.url, String(total), String(concurrency), client], {
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
  await deleteTopology(url, prefix, 0);
  return total / ((last - first) / 1000);
}

export async function dispatcherThroughput(
  url: string,
  receiver: ReceiverProcess,
  total: number,
  concurrency: number,
  client: 'undici' | 'got' = 'undici',
): Promise<number> {
  return (await dispatcherThroughputCores(url, receiver, total, concurrency, client)).rate;
}

/** The dispatcher's rate, with the cores it, the receiver and RabbitMQ used while delivering. */
export async function dispatcherThroughputCores(
  url: string,
  receiver: ReceiverProcess,
  total: number,
  concurrency: number,
  client: 'undici' | 'got' = 'undici',
): Promise<{ rate: number; cores: Record<string, number> }> {
  const prefix = benchPrefix('throughput');
  await fillDispatch(url, prefix, total, () => 'm_bench');
  await receiver.reset();
  const program = startProgram('dispatcher/main.js', {
    RABBITMQ_URL: url,
    TOPOLOGY_PREFIX: prefix,
    MERCHANTS_FILE: merchantsFile([{ id: 'm_bench', url: `${receiver.url}/ok` }]),
    RETRY_SCHEDULE: '5s',
    DISPATCH_CONCURRENCY: String(concurrency),
    ALLOW_PRIVATE_TARGETS: 'true',
    HTTP_CLIENT: client,
    METRICS_PORT: '0',
    LOG_LEVEL: 'warn',
  });
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
  await deleteTopology(url, prefix, 1);
  return { rate: total / ((stats.last - stats.first) / 1000), cores };
}

/**
 * CPU time of `pid` per delivery the receiver counted, from /proc, between the first delivery
 * and the last: CPU time, unlike a rate, holds when other processes share the machine.
 */
async function cpuPerDelivery(pid: number | undefined, receiver: ReceiverProcess, total: number): Promise<number> {
  await until('first delivery', async () => (await receiver.stats()).count > 0, 30_000, 5);
  const cpuBefore = cpuSeconds(pid);
  const countBefore = (await receiver.stats()).count;
  await until('all deliveries', async () => (await receiver.stats()).count >= total, 180_000, 20);
  const cpuAfter = cpuSeconds(pid);
  const delivered = (await receiver.stats()).count - countBefore;
  return cpuBefore === undefined || cpuAfter === undefined ? NaN : ((cpuAfter - cpuBefore) * 1e6) / delivered;
}

/** The reference pipeline (bench/reference-pipeline.ts) in its own process: its rate and CPU µs per delivery. */
export async function referenceThroughput(url: string, receiver: ReceiverProcess, total: number, prefetch: number, inFlight: number) {
  const prefix = benchPrefix('reference');
  await fillDispatch(url, prefix, total, () => 'm_bench');
  await receiver.reset();
  const args = process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir=profiles'] : [];
  const child = fork(fileURLToPath(new URL('./reference-pipeline.js', import.meta.url)), [url, `${prefix}.dispatch`, receiver.url, String(total), String(prefetch), String(inFlight), SECRET], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    execArgv: args,
  });
  try {
    const exited = once(child, 'exit');
    const cpuUs = await cpuPerDelivery(child.pid, receiver, total);
    // It waits to be told, so that /proc still held it when its CPU time was read.
    child.send('exit');
    await Promise.race([exited, new Promise((_, reject) => setTimeout(() => reject(new Error('bench: the reference pipeline did not exit')), 30_000).unref())]);
    const stats = await receiver.stats();
    return { rate: total / ((stats.last - stats.first) / 1000), cpuUs };
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
    await deleteTopology(url, prefix, 0);
  }
}

/** The dispatcher as deployed (its own process, every guarantee on): its rate and CPU µs per delivery. */
export async function dispatcherCpu(url: string, receiver: ReceiverProcess, total: number, concurrency: number, env: Record<string, string> = {}) {
  const prefix = benchPrefix('throughput');
  await fillDispatch(url, prefix, total, () => 'm_bench');
  await receiver.reset();
  const program = startProgram('dispatcher/main.js', {
    RABBITMQ_URL: url,
    TOPOLOGY_PREFIX: prefix,
    MERCHANTS_FILE: merchantsFile([{ id: 'm_bench', url: `${receiver.url}/ok` }]),
    RETRY_SCHEDULE: '5s',
    DISPATCH_CONCURRENCY: String(concurrency),
    ALLOW_PRIVATE_TARGETS: 'true',
    METRICS_PORT: '0',
    LOG_LEVEL: 'warn',
    ...env,
  });
  try {
    const cpuUs = await cpuPerDelivery(program.child.pid, receiver, total);
    const stats = await receiver.stats();
    return { rate: total / ((stats.last - stats.first) / 1000), cpuUs };
  } finally {
    await program.stop();
    await deleteTopology(url, prefix, 1);
  }
}
