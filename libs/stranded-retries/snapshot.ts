import type { BrokerConnection } from '../broker/index.js';
import { HEADERS, JOURNAL_ENTRY_TYPES } from '../contracts/index.js';
import { offsetOf } from '../streams/index.js';

/**
 * The retry watch's state at one journal offset, so a starting watch reads the journal from there
 * instead of from its first entry. Times are durations measured by the writer on its own
 * monotonic clock (how long until due, how long ago read), never instants: a reader adds them to
 * its own clock, so no decision compares two hosts' clocks.
 */
export interface WatchSnapshot {
  v: 1;
  /** The last journal offset the state includes. */
  covers: number;
  /**
   * What the entry at `covers` is (entryIdentity): an offset alone does not say which journal it
   * is of, since a journal deleted and declared again starts its offsets over. Absent in snapshots
   * written before it was added.
   */
  coversEntry?: string;
  /** [scheduleId, entry offset, body offset, webhookId, queue, due in ms, claimId, claim read ms ago] */
  waits: Array<[string, number, number, string | null, string, number, string | null, number | null]>;
  /** [wait key, winning copy id, read ms ago, recovered] */
  arrivals: Array<[string, string, number, boolean]>;
  /** [webhookId, offset of the entry holding its body, read ms ago] */
  bodies: Array<[string, number, number]>;
}

/**
 * A journal entry told apart from any other by the ids it carries (a wait's schedule id, a copy
 * id, an arrival's or a claim's id, all random), so that a snapshot can tell whether the entry at
 * its offset is still the one it covered.
 */
export function entryIdentity(headers: Record<string, unknown> | undefined): string {
  const h = headers ?? {};
  return JSON.stringify([h[HEADERS.entryType] ?? null, h[HEADERS.scheduleId] ?? null, h[HEADERS.copyId] ?? null, h[HEADERS.claimId] ?? null]);
}

export function appendSnapshot(broker: BrokerConnection, stream: string, snapshot: WatchSnapshot, deadlineMs: number): Promise<void> {
  return broker.sendToQueue(
    stream,
    Buffer.from(JSON.stringify(snapshot)),
    { contentType: 'application/json', headers: { [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.snapshot } },
    deadlineMs,
  );
}

/**
 * The newest snapshot: only snapshots are written to that stream, so its last chunk holds the
 * newest one. The broker delivers a chunk at once; a short quiet after the last entry ends the
 * read, and an empty stream answers undefined after `emptyAfterMs`.
 */
export async function readLatestSnapshot(
  broker: BrokerConnection,
  stream: string,
  options: { emptyAfterMs?: number; quietMs?: number } = {},
): Promise<WatchSnapshot | undefined> {
  const channel = await broker.createChannel();
  let consumerTag: string | undefined;
  try {
    await channel.prefetch(10);
    const content = await new Promise<Buffer | undefined>((resolve, reject) => {
      let best: { offset: number; content: Buffer } | undefined;
      let timer = setTimeout(() => resolve(undefined), options.emptyAfterMs ?? 1_000);
      channel.on('close', () => reject(new Error(`channel closed while reading ${stream}`)));
      channel
        .consume(
          stream,
          (message) => {
            if (!message) return;
            channel.ack(message);
            const offset = offsetOf(message.properties.headers) ?? -1;
            if (message.properties.headers?.[HEADERS.entryType] === JOURNAL_ENTRY_TYPES.snapshot && (!best || offset > best.offset)) {
              best = { offset, content: message.content };
            }
            clearTimeout(timer);
            timer = setTimeout(() => resolve(best?.content), options.quietMs ?? 150);
          },
          { arguments: { 'x-stream-offset': 'last' } },
        )
        .then((ok) => {
          consumerTag = ok.consumerTag;
        }, reject);
    });
    if (!content) return undefined;
    const parsed = JSON.parse(content.toString('utf8')) as WatchSnapshot;
    return parsed.v === 1 && Number.isSafeInteger(parsed.covers) ? parsed : undefined;
  } finally {
    // RabbitMQ 3.10 keeps a stream consumer registered when its channel closes without a cancel.
    if (consumerTag) await channel.cancel(consumerTag).catch(() => {});
    await channel.close().catch(() => {});
  }
}
