/**
 * The retries journal: bytes journaled per retried webhook, and dispatcher start-up to ready with
 * a journal of 1,000,000 entries, from the newest snapshot and (for comparison) from the first entry.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import amqp, { type ConsumeMessage } from 'amqplib';
import { loadDispatcherConfig } from '../apps/dispatcher/config.js';
import { startDispatcher } from '../apps/dispatcher/program.js';
import { BrokerConnection } from '../libs/broker/index.js';
import { HEADERS, JOURNAL_ENTRY_TYPES, sampleEvent } from '../libs/contracts/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { readLatestSnapshot, RetryWatch } from '../libs/stranded-retries/index.js';
import { declareTopology, topologyNames } from '../libs/topology/index.js';
import { benchPrefix, deleteTopology, merchantsFile } from './fixtures.js';

export interface JournalBytesResult {
  webhooks: number;
  waitsPerWebhook: number;
  bodyBytes: number;
  bytesPerRetriedWebhook: number;
  /** The same entries if every wait carried the body, as before. */
  bytesPerRetriedWebhookBodyEachTime: number;
}

export interface JournalStartupResult {
  entries: number;
  fillSeconds: number;
  snapshotBytes: number;
  startupFromSnapshotMs: number;
  /** The snapshot written right after the fill, holding every arrival. */
  fullSnapshotBytes: number;
  startupFromFullSnapshotMs: number;
  replayFromFirstMs: number;
}

const TIERS = 3;

/** Entry size as stored: body plus headers (their JSON length, close to their AMQP table size). */
function entryBytes(message: ConsumeMessage): number {
  return message.content.length + JSON.stringify(message.properties.headers ?? {}).length;
}

async function readJournal(url: string, stream: string, until: (m: ConsumeMessage) => boolean): Promise<ConsumeMessage[]> {
  const connection = await amqp.connect(url);
  const channel = await connection.createChannel();
  await channel.prefetch(2_000);
  const entries: ConsumeMessage[] = [];
  let done!: () => void;
  const finished = new Promise<void>((resolve) => (done = resolve));
  const { consumerTag } = await channel.consume(
    stream,
    (message) => {
      if (!message) return;
      entries.push(message);
      channel.ack(message);
      if (until(message)) done();
    },
    { arguments: { 'x-stream-offset': 'first' } },
  );
  await finished;
  await channel.cancel(consumerTag);
  await connection.close();
  return entries;
}

/** A merchant that fails each webhook's first `failures` attempts, then answers 204. */
async function failingMerchant(failures: number) {
  const seen = new Map<string, number>();
  let delivered = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const id = String(req.headers['webhook-id']);
      const n = (seen.get(id) ?? 0) + 1;
      seen.set(id, n);
      if (n > failures) delivered++;
      res.writeHead(n > failures ? 204 : 500).end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    delivered: () => delivered,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function env(url: string, prefix: string, file: string): Record<string, string> {
  return {
    RABBITMQ_URL: url,
    TOPOLOGY_PREFIX: prefix,
    MERCHANTS_FILE: file,
    RETRY_SCHEDULE: Array.from({ length: TIERS }, () => '100ms').join(','),
    METRICS_PORT: '0',
    ALLOW_PRIVATE_TARGETS: 'true',
    QUORUM_GROUP_SIZE: '1',
    STREAM_CLUSTER_SIZE: '1',
    FAILED_RETENTION: '1D',
    LOG_LEVEL: 'error',
  };
}

/** `webhooks` webhooks with a ~2 KB body, each failing three times (three waits) before it is delivered. */
export async function benchJournalBytes(url: string, webhooks: number): Promise<JournalBytesResult> {
  const prefix = benchPrefix('journal-bytes');
  const names = topologyNames(prefix);
  const merchant = await failingMerchant(TIERS);
  const program = await startDispatcher(
    // A merchant each, on an endpoint each: one endpoint failing 600 times would open its circuit.
    loadDispatcherConfig(env(url, prefix, merchantsFile(Array.from({ length: webhooks }, (_, i) => ({ id: `m_bench_${i}`, url: `${merchant.url}/${i}` }))))),
    silentLogger(),
  );
  try {
    const connection = await amqp.connect(url);
    const channel = await connection.createConfirmChannel();
    let bodyBytes = 0;
    for (let i = 0; i < webhooks; i++) {
      const event = sampleEvent('charge.completed', `m_bench_${i}`);
      event.data.note = 'x'.repeat(1_600);
      const body = Buffer.from(JSON.stringify(event));
      bodyBytes = body.length;
      channel.publish(names.events, 'charge.completed', body, { persistent: true, messageId: `evt_${randomUUID()}`, contentType: 'application/json' });
    }
    await channel.waitForConfirms();
    await connection.close();
    const deadline = Date.now() + 120_000;
    while (merchant.delivered() < webhooks && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
    const marker = randomUUID();
    await program.broker.sendToQueue(names.retries, Buffer.from('{}'), { headers: { [HEADERS.entryType]: 'marker', [HEADERS.scheduleId]: marker } });
    const entries = await readJournal(url, names.retries, (m) => m.properties.headers?.[HEADERS.scheduleId] === marker);
    const journal = entries.filter((m) => m.properties.headers?.[HEADERS.scheduleId] !== marker && m.properties.headers?.[HEADERS.entryType] !== 'checkpoint');
    const bytes = journal.reduce((sum, m) => sum + entryBytes(m), 0);
    const pointers = journal.filter((m) => m.properties.headers?.[HEADERS.bodyOffset] !== undefined).length;
    const scheduled = journal.filter((m) => m.properties.headers?.[HEADERS.entryType] === JOURNAL_ENTRY_TYPES.scheduled).length;
    return {
      webhooks,
      waitsPerWebhook: scheduled / webhooks,
      bodyBytes,
      bytesPerRetriedWebhook: bytes / webhooks,
      bytesPerRetriedWebhookBodyEachTime: (bytes + pointers * bodyBytes) / webhooks,
    };
  } finally {
    await program.stop();
    await merchant.close();
    await deleteTopology(url, prefix, TIERS);
  }
}

/**
 * Fills the journal with `entries` entries as the dispatcher writes them (each webhook: a wait with
 * its body, two waits pointing at it, three arrivals), lets a watch that has read them all write
 * its snapshot, then times a dispatcher from start to ready.
 */
export async function benchJournalStartup(url: string, entries: number): Promise<JournalStartupResult> {
  const prefix = benchPrefix('journal-startup');
  const names = topologyNames(prefix);
  const logger = silentLogger();
  const broker = new BrokerConnection({
    url,
    name: 'bench-journal',
    logger,
    declare: (openChannel) =>
      declareTopology(openChannel, { prefix, retryDelaysMs: Array.from({ length: TIERS }, () => 100), failedRetention: '1D', replication: { quorumGroupSize: 1, streamClusterSize: 1 } }),
  });
  await broker.open(10_000);
  try {
    const started = performance.now();
    const connection = await amqp.connect(url);
    const channel = await connection.createConfirmChannel();
    const body = Buffer.from(JSON.stringify(sampleEvent('charge.completed', 'm_bench')));
    let offset = 0;
    for (let written = 0; written < entries; ) {
      const webhookId = `evt_${randomUUID()}`;
      let bodyOffset: number | undefined;
      for (let wait = 0; wait < TIERS && written < entries; wait++) {
        const scheduleId = randomUUID();
        const headers: Record<string, string | number> = {
          [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.scheduled,
          [HEADERS.scheduleId]: scheduleId,
          [HEADERS.retryQueue]: names.retry(wait),
          [HEADERS.dueAt]: Date.now(),
          [HEADERS.webhookId]: webhookId,
          [HEADERS.merchantId]: 'm_bench',
          [HEADERS.attempts]: wait + 1,
          [HEADERS.copyId]: randomUUID(),
        };
        if (bodyOffset !== undefined) headers[HEADERS.bodyOffset] = bodyOffset;
        if (!channel.sendToQueue(names.retries, bodyOffset === undefined ? body : Buffer.alloc(0), { headers })) await once(channel, 'drain');
        bodyOffset ??= offset;
        offset++;
        written++;
        if (written >= entries) break;
        const arrived = { [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.arrived, [HEADERS.scheduleId]: scheduleId, [HEADERS.copyId]: headers[HEADERS.copyId]! };
        if (!channel.sendToQueue(names.retries, Buffer.from('{}'), { headers: arrived })) await once(channel, 'drain');
        offset++;
        written++;
        if (written % 10_000 === 0) await channel.waitForConfirms();
      }
    }
    await channel.waitForConfirms();
    await connection.close();
    const fillSeconds = (performance.now() - started) / 1000;

    // Without a snapshot: every entry is read at start-up.
    const replayStart = performance.now();
    const full = new RetryWatch(broker, names.retries, logger, { dispatch: names.dispatch, tierDelaysMs: {}, overdueAfterMs: 120_000, checkEveryMs: 3_600_000 });
    await full.start();
    await full.waitUntilCaughtUp(600_000);
    const replayFromFirstMs = performance.now() - replayStart;
    await full.stop();

    // A running dispatcher's watch writes its snapshot: once right after reading everything (it
    // remembers every arrival: the worst case), once with its clock a day on, as when the entries
    // span the journal's week of retention and it has forgotten arrivals over an hour old.
    const file = merchantsFile([{ id: 'm_bench', url: 'http://127.0.0.1:9/none' }]);
    const startup = async (skewMs: number) => {
      let skew = 0;
      const writer = new RetryWatch(broker, names.retries, logger, {
        dispatch: names.dispatch,
        tierDelaysMs: {},
        overdueAfterMs: 120_000,
        checkEveryMs: 3_600_000,
        snapshots: { stream: names.retrySnapshots, everyEntries: Number.MAX_SAFE_INTEGER },
        clock: () => performance.now() + skew,
      });
      await writer.start();
      await writer.waitUntilCaughtUp(600_000);
      skew = skewMs;
      await writer.check();
      await writer.writeSnapshot();
      await writer.stop();
      const bytes = (await readLatestSnapshot(broker, names.retrySnapshots))?.bytes ?? 0;
      const at = performance.now();
      const program = await startDispatcher(loadDispatcherConfig(env(url, prefix, file)), logger);
      const ms = performance.now() - at;
      await program.stop();
      return { bytes, ms };
    };
    const fresh = await startup(0);
    const aged = await startup(25 * 3_600_000);
    return {
      entries,
      fillSeconds,
      snapshotBytes: aged.bytes,
      startupFromSnapshotMs: aged.ms,
      fullSnapshotBytes: fresh.bytes,
      startupFromFullSnapshotMs: fresh.ms,
      replayFromFirstMs,
    };
  } finally {
    await broker.close();
    await deleteTopology(url, prefix, TIERS);
  }
}
