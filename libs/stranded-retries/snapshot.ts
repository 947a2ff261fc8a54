import type { BrokerConnection } from '../broker/index.js';
import { HEADERS, JOURNAL_ENTRY_TYPES } from '../contracts/index.js';
import { offsetOf } from '../streams/index.js';

/**
 * The retry watch's state at one journal offset, so a starting watch reads the journal from there
 * instead of from its first entry. Times are durations measured by the writer on its own
 * monotonic clock (how long until due, how long ago read), never instants: a reader adds them to
 * its own clock, so no decision compares two hosts' clocks.
 */
export interface WatchSnapshotV1 {
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
 * Version 2 holds the watch's records as they are in memory, columns of numbers: a million waits
 * are 48 MB of columns instead of about 150 MB of JSON arrays (more than RabbitMQ's default
 * largest message), and read back in well under a second. On the wire see encodeSnapshotV2.
 */
export interface WatchSnapshotV2 {
  v: 2;
  covers: number;
  coversEntry?: string;
  /** The lanes of waits (one per tier) and of arrivals (retry, resend, recovered), with their record counts. */
  waitLanes: Array<{ name: string; count: number }>;
  arrivalLanes: Array<{ name: string; count: number }>;
  /** Keys that are not UUIDs: [lane index, record index, key] (waits, then arrivals). */
  rawWaitKeys: Array<[number, number, string]>;
  rawArrivalKeys: Array<[number, number, string]>;
  /** Winning copy ids that are not UUIDs: [arrival lane index, record index, copy id]. */
  rawCopyIds: Array<[number, number, string]>;
  /** [scheduleId, claimId, claim read ms ago] */
  claims: Array<[string, string, number]>;
  /** [offset, read ms ago]: when entries were read, for how long a body may be pointed at. */
  readTimes: Array<[number, number]>;
}

/**
 * A lane's records: keys as four 32-bit words each (zero for a key kept in rawKeys), then each
 * column as float64 (NaN where unset). Waits: offset, body offset, due in ms, drained ms ago.
 * Arrivals: read ms ago, body offset, the copy id's four words.
 */
export interface WatchColumns {
  keys: Uint32Array;
  columns: Float64Array[];
}

/** As read back; `bytes` is the message's size. */
export type WatchSnapshot = (WatchSnapshotV1 & { lanes?: undefined; bytes?: number }) | (WatchSnapshotV2 & { lanes: { waits: WatchColumns[]; arrivals: WatchColumns[] }; bytes?: number });

export const WAIT_COLUMNS = 4;
export const ARRIVAL_COLUMNS = 6;

/**
 * A journal entry told apart from any other by the ids it carries (a wait's schedule id, a copy
 * id, an arrival's or a claim's id, all random), so that a snapshot can tell whether the entry at
 * its offset is still the one it covered.
 */
export function entryIdentity(headers: Record<string, unknown> | undefined): string {
  const h = headers ?? {};
  return JSON.stringify([h[HEADERS.entryType] ?? null, h[HEADERS.scheduleId] ?? null, h[HEADERS.copyId] ?? null, h[HEADERS.claimId] ?? null]);
}

/** Content as encodeSnapshotV2 (or, for a version 1 snapshot, JSON) made it. */
export function appendSnapshot(broker: BrokerConnection, stream: string, content: Buffer, deadlineMs: number): Promise<void> {
  const contentType = content[0] === 0x7b ? 'application/json' : 'application/octet-stream';
  return broker.sendToQueue(stream, content, { contentType, headers: { [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.snapshot } }, deadlineMs);
}

/** Starts a version 2 snapshot; version 1 is JSON and starts with `{`. */
const MAGIC = Buffer.from('RWSNAP2\n');
/** Room left after the columns for the header, so that the snapshot is not copied whole to add it. */
const HEADER_ROOM = 65_536;

/**
 * A version 2 snapshot: the magic, the lanes' columns (WatchColumns, `columnBytes` in all, written
 * by `write` into the buffer at the offset it is given, a multiple of 8, and it returns the
 * header), then the header as JSON and its length (4 bytes). Built in one buffer: a million waits
 * are 48 MB, and a dispatcher's peak memory is what it holds plus what it builds.
 */
export function encodeSnapshotV2(columnBytes: number, write: (into: ArrayBuffer, at: number) => WatchSnapshotV2): Buffer {
  const memory = new ArrayBuffer(MAGIC.length + columnBytes + HEADER_ROOM);
  const out = Buffer.from(memory);
  MAGIC.copy(out, 0);
  const header = Buffer.from(JSON.stringify(write(memory, MAGIC.length)));
  const end = MAGIC.length + columnBytes;
  const length = Buffer.alloc(4);
  length.writeUInt32BE(header.length, 0);
  if (header.length + 4 > HEADER_ROOM) return Buffer.concat([out.subarray(0, end), header, length]);
  header.copy(out, end);
  length.copy(out, end + header.length);
  return out.subarray(0, end + header.length + 4);
}

/** Version 1 is JSON; version 2 as encodeSnapshotV2 wrote it, its columns read in place when aligned. */
export function decodeSnapshot(content: Buffer): WatchSnapshot | undefined {
  if (content[0] === 0x7b) {
    const parsed = JSON.parse(content.toString('utf8')) as WatchSnapshotV1;
    return parsed.v === 1 && Number.isSafeInteger(parsed.covers) ? parsed : undefined;
  }
  if (content.length < MAGIC.length + 4 || !content.subarray(0, MAGIC.length).equals(MAGIC)) return undefined;
  const length = content.readUInt32BE(content.length - 4);
  const headerAt = content.length - 4 - length;
  const header = JSON.parse(content.subarray(headerAt, content.length - 4).toString('utf8')) as WatchSnapshotV2;
  if (header.v !== 2 || !Number.isSafeInteger(header.covers)) return undefined;
  // A Float64Array must start on a multiple of 8: the message's own bytes when they do, else one copy.
  let memory = content.buffer as ArrayBuffer;
  let base = content.byteOffset;
  if (base % 8 !== 0) {
    memory = new ArrayBuffer(content.length);
    new Uint8Array(memory).set(content);
    base = 0;
  }
  let at = base + MAGIC.length;
  const lane = (count: number, columns: number): WatchColumns => {
    const keys = new Uint32Array(memory, at, count * 4);
    at += count * 16;
    return {
      keys,
      columns: Array.from({ length: columns }, () => {
        const column = new Float64Array(memory, at, count);
        at += count * 8;
        return column;
      }),
    };
  };
  const waits = header.waitLanes.map(({ count }) => lane(count, WAIT_COLUMNS));
  const arrivals = header.arrivalLanes.map(({ count }) => lane(count, ARRIVAL_COLUMNS));
  if (at !== base + headerAt) throw new Error('retry watch snapshot: columns do not match their header');
  return { ...header, lanes: { waits, arrivals }, bytes: content.length };
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
    const snapshot = decodeSnapshot(content);
    if (snapshot) snapshot.bytes = content.length;
    return snapshot;
  } finally {
    // RabbitMQ 3.10 keeps a stream consumer registered when its channel closes without a cancel.
    if (consumerTag) await channel.cancel(consumerTag).catch(() => {});
    await channel.close().catch(() => {});
  }
}
