/**
 * Scenario 1: dispatch throughput for N events to a fast local receiver, beside the raw limits
 * measured in the same run with the same receiver and concurrency: the broker alone (consume +
 * ack, no HTTP) and the HTTP client alone (the dispatcher's got client, and undici for reference).
 */
import amqp from 'amqplib';
import { Agent, request } from 'undici';
import { createGotClient } from '../libs/http/index.js';
import { WebhookSigner } from '../libs/signing/index.js';
import { brokerPid, coresDuring } from './cpu.js';
import { SECRET, benchPrefix, deleteTopology, eventBody, fillDispatch, merchantsFile } from './fixtures.js';
import { type ReceiverProcess, startProgram, until } from './processes.js';

async function timed(total: number, concurrency: number, one: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) await one(next++);
    }),
  );
  return total / ((performance.now() - started) / 1000);
}

function signedRequest(signer: WebhookSigner, i: number) {
  const body = `{"event":"charge.completed","data":${JSON.stringify(JSON.parse(eventBody('m_bench').toString()).data)}}`;
  const headers = { 'content-type': 'application/json', 'user-agent': 'bench', ...signer.sign(SECRET, `evt_${i}`, body) };
  return { body, headers };
}

export async function rawGot(receiver: ReceiverProcess, total: number, concurrency: number): Promise<number> {
  const client = createGotClient({ allowPrivateTargets: true });
  const signer = new WebhookSigner();
  try {
    return await timed(total, concurrency, async (i) => {
      const { body, headers } = signedRequest(signer, i);
      const res = await client.post({ url: `${receiver.url}/ok`, body, headers, timeoutMs: 10_000 });
      if (res.status !== 204) throw new Error(`receiver answered ${res.status}`);
    });
  } finally {
    client.close();
  }
}

export async function rawUndici(receiver: ReceiverProcess, total: number, concurrency: number): Promise<number> {
  return (await rawUndiciCores(receiver, total, concurrency)).result;
}

/** Raw undici, with the cores the bench process, the receiver and RabbitMQ used meanwhile. */
export async function rawUndiciCores(receiver: ReceiverProcess, total: number, concurrency: number) {
  const dispatcher = new Agent({ connections: concurrency, pipelining: 1 });
  const signer = new WebhookSigner();
  try {
    return await coresDuring({ client: process.pid, receiver: receiver.pid, broker: brokerPid() }, () => timed(total, concurrency, async (i) => {
      const { body, headers } = signedRequest(signer, i);
      const res = await request(`${receiver.url}/ok`, { method: 'POST', body, headers, dispatcher });
      await res.body.dump();
      if (res.statusCode !== 204) throw new Error(`receiver answered ${res.statusCode}`);
    }));
  } finally {
    await dispatcher.close();
  }
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
