import type { ConsumeMessage } from 'amqplib';
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

/**
 * Version 3 is version 2 (the waits in memory, the arrivals, the claims) plus the waits the watch
 * keeps on disk (WaitSpill), which can be millions: those are written first, as parts of at most
 * 8 MB (`x-snapshot-id`, `x-snapshot-part` 1..parts, `x-snapshot-lane`), each holding records as
 * WaitSpill encodes them with times as durations; this message comes last, so a reader that finds
 * it knows its parts are all written. No single message grows with the number waiting.
 */
export interface WatchSnapshotV3 extends Omit<WatchSnapshotV2, 'v'> {
  v: 3;
  id: string;
  /** Parts written before this message, in order. */
  parts: number;
  /** When the first part was written (the writer's wall clock, ms): where a reader starts looking for them. */
  startedAt: number;
  /** Waits on disk, by tier: [queue, count], in the parts in this order. */
  spilled: Array<[string, number]>;
  /** Arrivals of waits that were on disk: [key, journal offset of the arrival]. */
  tombstones: Array<[string, number]>;
}

/** As read back; `bytes` is the message's size. */
export type WatchSnapshot =
  | (WatchSnapshotV1 & { lanes?: undefined; bytes?: number })
  | ((WatchSnapshotV2 | WatchSnapshotV3) & { lanes: { waits: WatchColumns[]; arrivals: WatchColumns[] }; bytes?: number });

export const SNAPSHOT_HEADERS = { id: 'x-snapshot-id', part: 'x-snapshot-part', lane: 'x-snapshot-lane' } as const;
/** A part of a version 3 snapshot holds at most this many bytes of records. */
export const SNAPSHOT_PART_BYTES = 8 * 1024 * 1024;

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
export function encodeSnapshotV2(columnBytes: number, write: (into: ArrayBuffer, at: number) => WatchSnapshotV2 | WatchSnapshotV3): Buffer {
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
  const header = JSON.parse(content.subarray(headerAt, content.length - 4).toString('utf8')) as WatchSnapshotV2 | WatchSnapshotV3;
  if ((header.v !== 2 && header.v !== 3) || !Number.isSafeInteger(header.covers)) return undefined;
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

/** Part of a version 3 snapshot, written before its last message. */
export function appendSnapshotPart(broker: BrokerConnection, stream: string, id: string, part: number, lane: string, content: Buffer, deadlineMs: number): Promise<void> {
  const headers = { [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.snapshotPart, [SNAPSHOT_HEADERS.id]: id, [SNAPSHOT_HEADERS.part]: part, [SNAPSHOT_HEADERS.lane]: lane };
  return broker.sendToQueue(stream, content, { contentType: 'application/octet-stream', headers }, deadlineMs);
}

/** How far back to look when the stream's last chunk holds no whole snapshot (another writer's parts are being written). */
const LOOK_BACK_MS = 20 * 60_000;
/** Chunk timestamps are the broker's clock, a snapshot's start the writer's: look this much earlier. */
const CLOCK_MARGIN_MS = 60_000;

const timestampSpec = (ms: number) => ({ '!': 'timestamp', value: Math.max(0, Math.floor(ms / 1000)) });

/**
 * The newest snapshot: the newest last message of one (parts are not), from the stream's last
 * chunk, else from the chunks of the last 20 minutes. The broker delivers a chunk at once; a short
 * quiet after the last entry ends the read, and an empty stream answers undefined after
 * `emptyAfterMs`.
 */
export async function readLatestSnapshot(
  broker: BrokerConnection,
  stream: string,
  options: { emptyAfterMs?: number; quietMs?: number } = {},
): Promise<WatchSnapshot | undefined> {
  let content: Buffer | undefined;
  for (const from of ['last', timestampSpec(Date.now() - LOOK_BACK_MS)]) {
    let best: { offset: number; content: Buffer } | undefined;
    let read = 0;
    await readFrom(broker, stream, from, options, (message, offset) => {
      read++;
      if (message.properties.headers?.[HEADERS.entryType] === JOURNAL_ENTRY_TYPES.snapshot && (!best || offset > best.offset)) best = { offset, content: message.content };
      return false;
    });
    content = best?.content;
    // An empty stream has nothing further back either.
    if (content || read === 0) break;
  }
  if (!content) return undefined;
  const snapshot = decodeSnapshot(content);
  if (snapshot) snapshot.bytes = content.length;
  return snapshot;
}

/**
 * Reads the parts of a version 3 snapshot, in order, handing each to `onPart`. Throws when they
 * are not all found (retention dropped them, or the writer's clock is far from the broker's).
 */
export async function readSnapshotParts(broker: BrokerConnection, stream: string, snapshot: WatchSnapshotV3, onPart: (lane: string, content: Buffer) => void): Promise<void> {
  if (snapshot.parts === 0) return;
  let next = 1;
  let failure: Error | undefined;
  await readFrom(broker, stream, timestampSpec(snapshot.startedAt - CLOCK_MARGIN_MS), { emptyAfterMs: 5_000, quietMs: 5_000 }, (message) => {
    const headers = message.properties.headers ?? {};
    if (headers[HEADERS.entryType] !== JOURNAL_ENTRY_TYPES.snapshotPart || headers[SNAPSHOT_HEADERS.id] !== snapshot.id) return false;
    const part = headers[SNAPSHOT_HEADERS.part];
    const lane = headers[SNAPSHOT_HEADERS.lane];
    if (part !== next || typeof lane !== 'string') {
      failure = new Error(`retry watch snapshot ${snapshot.id}: part ${String(part)} read where part ${next} was expected`);
      return true;
    }
    onPart(lane, message.content);
    return ++next > snapshot.parts;
  });
  if (failure) throw failure;
  if (next <= snapshot.parts) throw new Error(`retry watch snapshot ${snapshot.id}: ${next - 1} of ${snapshot.parts} parts found`);
}

/**
 * Reads the stream from `from` until `visit` says done, or a quiet of `quietMs` after the last
 * entry (`emptyAfterMs` before the first).
 */
async function readFrom(
  broker: BrokerConnection,
  stream: string,
  from: unknown,
  options: { emptyAfterMs?: number; quietMs?: number },
  visit: (message: ConsumeMessage, offset: number) => boolean,
): Promise<void> {
  const channel = await broker.createChannel();
  let consumerTag: string | undefined;
  try {
    await channel.prefetch(10);
    await new Promise<void>((resolve, reject) => {
      let timer = setTimeout(resolve, options.emptyAfterMs ?? 1_000);
      let done = false;
      channel.on('close', () => reject(new Error(`channel closed while reading ${stream}`)));
      channel
        .consume(
          stream,
          (message) => {
            if (!message || done) return;
            channel.ack(message);
            clearTimeout(timer);
            if (visit(message, offsetOf(message.properties.headers) ?? -1)) {
              done = true;
              return resolve();
            }
            timer = setTimeout(resolve, options.quietMs ?? 150);
          },
          { arguments: { 'x-stream-offset': from } },
        )
        .then((ok) => {
          consumerTag = ok.consumerTag;
        }, reject);
    });
  } finally {
    // RabbitMQ 3.10 keeps a stream consumer registered when its channel closes without a cancel.
    if (consumerTag) await channel.cancel(consumerTag).catch(() => {});
    await channel.close().catch(() => {});
  }
}
