import { randomUUID } from 'node:crypto';
import type { Channel, ConsumeMessage } from 'amqplib';
import { type BrokerConnection, publishCopy } from '../broker/index.js';
import { HEADERS, JOURNAL_ENTRY_TYPES } from '../contracts/index.js';
import { EntryExpiredError, readEntriesAt, readEntryAt } from '../failed/reader.js';
import type { Logger } from '../logger/index.js';
import { ReadBacks, StreamTail } from '../streams/index.js';
import { appendArrived, appendRecoveryClaim, appendScheduled, recoveredCopy, type ScheduledRetry } from './journal.js';
import { KeyedLanes } from './keyed-lanes.js';
import { OffsetClock } from './offset-clock.js';
import {
  ARRIVAL_COLUMNS,
  appendSnapshot,
  appendSnapshotPart,
  encodeSnapshotV2,
  entryIdentity,
  readLatestSnapshot,
  readSnapshotParts,
  WAIT_COLUMNS,
  type WatchColumns,
  type WatchSnapshot,
  type WatchSnapshotV3,
} from './snapshot.js';
import { uuidToWords, wordsToUuid } from './uuid-words.js';
import { WaitSpill } from './wait-spill.js';

export interface RetryWatchOptions {
  /** The dispatch queue, where a recovered message goes back. */
  dispatch: string;
  /** Each retry tier's queue and its delay: a wait is due that long after this watch read its entry. */
  tierDelaysMs: Readonly<Record<string, number>>;
  /**
   * How long after `dispatch` was seen empty past a wait's due time the wait counts as stranded
   * in its tier; also how long a recovery claim is left to its holder before another takes over.
   */
  overdueAfterMs: number;
  /** How often stranded waits are looked for (and `dispatch` looked at). */
  checkEveryMs?: number;
  /** Waits recovered per check at most, so that a tier that failed wholesale comes back in a stream, not a flood. */
  maxPerCheck?: number;
  /** Waits older than this are gone from the journal (its retention) and dropped from the watch. */
  retentionMs?: number;
  /**
   * How long the winning copy of a retry wait is remembered after it arrived (default 10 min): a
   * copy made again after a lost confirm waits in the same tier as its twin, published within the
   * move's backoff (15.5 s in all) after it, and comes out seconds after it. A resend's is
   * remembered a day, a recovered wait's as long as the journal keeps it. Arrivals are held at
   * about 100 bytes each: this times the rate of retries is their memory.
   */
  rememberArrivalsMs?: number;
  /** How long a copy waits to read its own arrival back before it is delivered anyway. */
  arrivalTimeoutMs?: number;
  /** The stream of snapshots of this state: read on start, written as the journal grows. */
  snapshots?: { stream: string; everyEntries?: number; everyMs?: number };
  /** Milliseconds on a monotonic clock; injected by tests to run a watch's clock ahead. */
  clock?: () => number;
  /** Waits between background appends of a wait the journal did not take (keepScheduling). */
  lateBackoffMs?: readonly number[];
  /**
   * Waits of one tier held in memory at most (default 20,000); the rest wait on local disk in
   * `spillDir` (default the system's temporary directory) and are read back in order as the
   * first ones come back. A tier hands its messages back in the order they entered it, so the
   * waits that can be due or stranded next are always the ones in memory.
   */
  waitsInMemoryPerTier?: number;
  spillDir?: string;
}

/**
 * A waiting retry's columns (KeyedLanes, a lane per tier): the scheduled entry and the one holding
 * the body (the same unless the webhook waited before); on this watch's clock, when it is due
 * (when it read the entry, plus the tier's delay) and the first time `dispatch` was seen empty
 * after it was due or claimed (NaN until then). Nothing else is held per wait: the webhook's id
 * and headers are read back from the entry when it is recovered.
 */
const W_OFFSET = 0;
const W_BODY = 1;
const W_DUE = 2;
const W_DRAINED = 3;
/** An arrival's columns: when read, the body offset of the wait it ended (NaN if none), the winning copy id's four words (NaN when not a UUID). */
const A_AT = 0;
const A_BODY = 1;
const A_COPY = 2;
/** Arrival lanes, each its own FIFO since each is remembered for its own time. */
const RETRY = 'retry';
const RESEND = 'resend';
const RECOVERED = 'recovered';

interface Claim {
  claimId: string;
  /** When this watch read it. */
  readAt: number;
}

/** A wait's fields copied out, to hold across an await (its handle may move). */
interface WaitCopy {
  scheduleId: string;
  queue: string;
  offset: number;
  bodyOffset: number;
  dueAt: number;
}

const DAY_MS = 86_400_000;
const REMEMBER_ARRIVALS_MS = 600_000;
const WAITS_IN_MEMORY_PER_TIER = 20_000;
/** Waits of one tier per part of a snapshot: about 5 MB of records. */
const SNAPSHOT_PART_RECORDS = 100_000;

/**
 * A wait's x-body-offset names an entry that does not hold its webhook's body. Offsets are no
 * identity: a journal deleted and declared again starts them over, and a move journaled by a
 * dispatcher that had not seen the deletion yet points into the old journal. Recovering from it
 * would send another webhook's body under this one's id.
 */
export class BodyOfAnotherWebhookError extends Error {
  constructor(readonly bodyOffset: number) {
    super(`the journal entry at ${bodyOffset} holds another webhook's body`);
    this.name = 'BodyOfAnotherWebhookError';
  }
}

/** A scheduled entry of the same webhook, with its body. */
function holdsBodyOf(body: ConsumeMessage, entry: ConsumeMessage): boolean {
  const headers = body.properties.headers ?? {};
  const webhookId = entry.properties.headers?.[HEADERS.webhookId];
  return (
    headers[HEADERS.entryType] === JOURNAL_ENTRY_TYPES.scheduled &&
    headers[HEADERS.bodyOffset] === undefined &&
    typeof webhookId === 'string' &&
    headers[HEADERS.webhookId] === webhookId
  );
}
/**
 * Prefix of the wait keys of resent webhooks: `resend:<x-failure-id>` of the entry resent (or
 * `resend:<offset>` on a copy resent before failure entries had ids).
 */
export const RESEND_KEY = 'resend:';
/** After an arrival the journal did not confirm, how long copies are delivered without asking it. */
const JOURNAL_DOWN_MS = 15_000;
/** Recovered copies published at once: a tier that failed wholesale comes back in seconds, not minutes. */
const RECOVER_IN_FLIGHT = 64;
const PROBE_TIMEOUT_MS = 5_000;
/** Waits appended again in the background at most; beyond, a wait goes without its entry. */
const MAX_LATE_WAITS = 10_000;
const LATE_BACKOFF_MS = [2_000, 5_000, 10_000, 30_000];

/**
 * Tails the retries journal and knows every message waiting in a retry tier and which copy of each
 * wait arrived first. A tier whose dead-lettering stalls (RabbitMQ 3.10 and 4.x both have had
 * at-least-once dead-letter workers stuck after a leader change) holds its messages past their
 * time; a wait that has not arrived although `dispatch` was seen empty well after it was due
 * cannot be sitting in a backlog, so the watch puts one copy back in dispatch (claimed in the
 * journal, first claim in stream order wins across dispatchers). Every copy of a wait (the
 * original, a recovered copy, a publish whose confirm was lost and was made again) carries the
 * same key and its own copy id; the dispatcher delivers only the copy whose arrival is first in
 * the journal (`arrive`). Every time is read on this process's own monotonic clock.
 */
export class RetryWatch {
  readonly stats = { recovered: 0, unconfirmedArrivals: 0, snapshots: 0, recordedLate: 0, unrecorded: 0, unrecoverable: 0, restoredFromSnapshot: 0 };
  /** Waits the journal has not taken yet, appended again in the background (keepScheduling). */
  private readonly late = new Set<string>();
  /** Every wait not back yet, a lane per tier in the order read: within a tier, in the order due. */
  private readonly waits = new KeyedLanes(WAIT_COLUMNS);
  /** The first copy of each wait to arrive, in the order read. */
  private readonly arrivals = new KeyedLanes(ARRIVAL_COLUMNS);
  /** Copy ids that are not UUIDs, by key (tests, older writers). */
  private readonly rawCopyIds = new Map<string, string>();
  /** The current recovery claim of each claimed wait: few, only stranded waits are claimed. */
  private readonly claims = new Map<string, Claim>();
  private readonly readTimes = new OffsetClock();
  /** Waits of each tier beyond the first `window` (the tier's lane in `waits`), in the order read. */
  private readonly spill: WaitSpill;
  private readonly window: number;
  /** Lanes of `waits` that fell under half the window while waits of theirs are on disk. */
  private readonly refillLanes = new Set<number>();
  /**
   * Keys that arrived while waits were on disk and were not in memory: their wait may be on disk
   * still (a tier's order is not quite the journal's when several dispatchers move into it), and
   * must not be read back as waiting. By key, the arrival's journal offset.
   */
  private readonly tombstones = new Map<string, number>();
  /** Per tier with waits on disk, a journal offset below which none of them is left. */
  private readonly spillFloors = new Map<string, number>();
  private readonly words = new Uint32Array(4);
  private readonly claimWaiters = new ReadBacks<string[]>(() => void this.tail?.verifyLive());
  private readonly arrivalWaiters = new ReadBacks<string>(() => void this.tail?.verifyLive());
  private readonly scheduledWaiters = new ReadBacks<void>(() => void this.tail?.verifyLive());
  private tail?: StreamTail;
  private timer?: NodeJS.Timeout;
  private checking?: Promise<void>;
  private snapshotting?: Promise<void>;
  private probe?: Promise<Channel>;
  private stopped = false;
  private readonly clock: () => number;
  private lastOffset = -1;
  /** entryIdentity of the entry at lastOffset, so a snapshot names which journal it covers. */
  private lastEntry?: string;
  private appliedSinceSnapshot = 0;
  private lastSnapshotAt: number;
  private lastPruneAt = 0;
  /** Until then arrivals are delivered without waiting for the journal's verdict. */
  private journalDownUntil = 0;

  constructor(
    private readonly broker: BrokerConnection,
    private readonly stream: string,
    private readonly logger: Logger,
    private readonly options: RetryWatchOptions,
  ) {
    this.clock = options.clock ?? (() => performance.now());
    this.lastSnapshotAt = this.clock();
    this.window = Math.max(1, options.waitsInMemoryPerTier ?? WAITS_IN_MEMORY_PER_TIER);
    this.spill = new WaitSpill(WAIT_COLUMNS, options.spillDir);
  }

  /** Caught up with the journal: what it says is waiting is what is waiting. */
  get ready(): boolean {
    return this.tail?.ready ?? false;
  }

  async start(): Promise<void> {
    const snapshot = this.options.snapshots ? await this.loadSnapshot(this.options.snapshots.stream) : undefined;
    this.tail = new StreamTail(this.broker, this.stream, this.logger, {
      prefetch: 2_000,
      startAt: snapshot ? snapshot.covers + 1 : undefined,
      onEntry: (message, offset) => this.apply(message, offset),
      onCaughtUp: (offset) => this.logger.info('retries journal caught up', { waiting: this.waits.size + this.spill.size, onDisk: this.spill.size, offset }),
      // The journal was deleted: what it said is waiting is unknown now; the new one is read from its start.
      onReset: () => {
        this.clearState();
        this.lastOffset = -1;
        this.lastEntry = undefined;
        this.appliedSinceSnapshot = 0;
      },
    });
    await this.tail.start();
    this.timer = setInterval(() => {
      this.checking ??= this.check().finally(() => {
        this.checking = undefined;
      });
    }, this.options.checkEveryMs ?? 5_000);
    this.timer.unref();
  }

  /** Resolves once the journal is read up to date; a dispatcher takes deliveries only then. */
  waitUntilCaughtUp(timeoutMs: number): Promise<void> {
    return this.tail!.waitUntilCaughtUp(timeoutMs);
  }

  /**
   * The same, for as long as the journal is being read: fails only after `stalledMs` without an
   * entry read. A journal of millions of waits (a snapshot lost, or none written yet) takes
   * minutes to read at about 30,000 entries/s, and a dispatcher that gave up after a fixed time
   * would restart and read it again, forever.
   */
  async waitUntilCaughtUpWhileReading(stalledMs: number, onProgress?: (offset: number) => void): Promise<void> {
    for (;;) {
      const before = this.lastOffset;
      try {
        return await this.tail!.waitUntilCaughtUp(stalledMs);
      } catch (err) {
        if (this.lastOffset === before || this.stopped) throw err;
        onProgress?.(this.lastOffset);
      }
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.checking;
    await this.tail?.stop();
    const probe = await this.probe?.catch(() => undefined);
    await probe?.close().catch(() => {});
    await this.snapshotting;
    this.spill.close();
  }

  private clearState(): void {
    this.waits.clear();
    this.arrivals.clear();
    this.rawCopyIds.clear();
    this.claims.clear();
    this.readTimes.clear();
    this.spill.clear();
    this.refillLanes.clear();
    this.tombstones.clear();
    this.spillFloors.clear();
  }

  /**
   * A copy of a wait was consumed from dispatch: true if it is the copy to deliver, the first of its
   * key to arrive in stream order (the same copy redelivered stays the one). The verdict is the
   * journal's: this watch appends the arrival and waits to read it back, which means it has read
   * everything before it, however late it started. When the journal does not confirm in time the
   * copy is delivered (at least once beats never) and counted in `unconfirmedArrivals`, and so are
   * the copies arriving in the next 15 s, without waiting: a journal that lost its leader must not
   * hold every retry for the whole timeout.
   */
  async arrive(key: string, copyId: string): Promise<boolean> {
    const known = this.arrivedCopy(key);
    if (known !== undefined) return known === copyId;
    const timeoutMs = this.options.arrivalTimeoutMs ?? 10_000;
    if (this.clock() < this.journalDownUntil) {
      // The journal just failed to confirm one: while it recovers (a stream leader lost with its
      // node), do not hold every retry for the whole timeout; record the arrival in the background.
      this.stats.unconfirmedArrivals++;
      void appendArrived(this.broker, this.stream, { key, copyId }, timeoutMs).catch(() => {});
      return true;
    }
    const arrivalId = randomUUID();
    const readBack = this.arrivalWaiters.expect(arrivalId, timeoutMs, `arrival in ${this.stream}`);
    readBack.catch(() => {}); // it may time out while the append is still waiting; awaited below
    try {
      await appendArrived(this.broker, this.stream, { key, copyId, arrivalId }, timeoutMs);
      return (await readBack) === copyId;
    } catch (err) {
      this.arrivalWaiters.forget(arrivalId);
      this.stats.unconfirmedArrivals++;
      this.journalDownUntil = Math.max(this.journalDownUntil, this.clock() + JOURNAL_DOWN_MS);
      this.logger.warn('retry arrival not confirmed by the journal; delivered anyway', { key, error: (err as Error).message });
      return true;
    }
  }

  /**
   * Journals a move into a tier and resolves once this watch has read the entry back. A stream can
   * confirm an append and lose it when its leader dies (measured on the three-node 3.10 cluster:
   * 315 of 1,000 confirmed entries missing after a kill; rabbitmq-server#9457 reports the same on
   * later versions); a wait no watch holds is never recovered if its tier stalls. Throws when the
   * entry is not confirmed or not read back in time: the caller appends again (same scheduleId, so
   * a second copy changes nothing).
   */
  async schedule(retry: ScheduledRetry, timeoutMs: number): Promise<void> {
    const readBack = this.scheduledWaiters.expect(retry.scheduleId, timeoutMs, `scheduled entry in ${this.stream}`);
    readBack.catch(() => {}); // it may time out while the append is still waiting; awaited below
    try {
      await appendScheduled(this.broker, this.stream, retry, timeoutMs);
      await readBack;
    } catch (err) {
      this.scheduledWaiters.forget(retry.scheduleId);
      throw err;
    }
  }

  /** Waits being appended again in the background now. */
  get appendingLate(): number {
    return this.late.size;
  }

  /**
   * A wait the journal did not take while its move held the delivery (the journal's stream, or
   * this watch's reading of it, stalled for longer than the move's tries): appended again in the
   * background, same scheduleId, until this watch reads it back, the wait arrives, or the watch
   * stops; the delivery is acked meanwhile and its slot freed. Measured on a three-node 3.10
   * cluster: a journal unreadable for 55 s after a leader kill, and appends made then lost.
   */
  keepScheduling(retry: ScheduledRetry): void {
    if (this.stopped || this.late.has(retry.scheduleId)) return;
    if (this.late.size >= MAX_LATE_WAITS) {
      this.stats.unrecorded++;
      this.logger.warn('retry not recorded in the journal', { queue: retry.queue, scheduleId: retry.scheduleId, reason: 'too many waits already being appended again' });
      return;
    }
    this.late.add(retry.scheduleId);
    void (async () => {
      for (let attempt = 0; ; attempt++) {
        const backoff = this.options.lateBackoffMs ?? LATE_BACKOFF_MS;
        await new Promise((resolve) => setTimeout(resolve, backoff[Math.min(attempt, backoff.length - 1)]!).unref());
        if (this.arrivals.has(retry.scheduleId)) return; // back from its tier: nothing left to watch
        if (this.stopped) {
          this.stats.unrecorded++;
          this.logger.warn('retry not recorded in the journal', { queue: retry.queue, scheduleId: retry.scheduleId, reason: 'stopped' });
          return;
        }
        try {
          await this.schedule(retry, 10_000);
          this.stats.recordedLate++;
          this.logger.info('retry recorded in the journal after all', { queue: retry.queue, scheduleId: retry.scheduleId, tries: attempt + 1 });
          return;
        } catch {
          // the journal is still not taking it: next try after the backoff
        }
      }
    })().finally(() => this.late.delete(retry.scheduleId));
  }

  /**
   * Where the journal holds the body of the webhook that came back from the wait `key` (waiting
   * still, or arrived lately), so its next wait need not copy it again; undefined when unknown, or
   * read so long ago that retention could drop it before the next wait ends.
   */
  bodyOffsetOf(key: string): number | undefined {
    const wait = this.waits.get(key);
    const arrival = wait === undefined ? this.arrivals.get(key) : undefined;
    const offset = wait !== undefined ? this.waits.value(wait, W_BODY) : arrival !== undefined ? this.arrivals.value(arrival, A_BODY) : NaN;
    if (Number.isNaN(offset)) return undefined;
    const readAt = this.readTimes.readAtOf(offset);
    if (readAt === undefined || this.clock() - readAt > this.retentionMs / 2) return undefined;
    return offset;
  }

  /** Messages in each tier, ready or held by the broker, that have not come back yet. */
  waitingByQueue(): Map<string, number> {
    const counts = this.waits.counts();
    for (const queue of this.spill.lanes()) counts.set(queue, (counts.get(queue) ?? 0) + this.spill.count(queue));
    return counts;
  }

  /** Of those, the stranded ones: not back although dispatch drained well after they were due. */
  overdueByQueue(): Map<string, number> {
    const counts = new Map<string, number>();
    const now = this.clock();
    for (const lane of this.waits.laneIds()) {
      let overdue = 0;
      this.forEachDue(lane, now, (wait) => {
        if (this.stranded(wait, now)) overdue++;
      });
      if (overdue > 0) counts.set(this.waits.laneName(lane), overdue);
    }
    return counts;
  }

  /**
   * What this watch holds, for the metric of its own memory: records and the bytes of the arrays
   * holding them. About 100 bytes per waiting webhook and per arrival remembered.
   */
  memory(): { waits: number; waitsOnDisk: number; arrivals: number; claims: number; bytes: number; diskBytes: number } {
    return {
      waits: this.waits.size + this.spill.size,
      waitsOnDisk: this.spill.size,
      arrivals: this.arrivals.size,
      claims: this.claims.size,
      bytes: this.waits.bytesHeld() + this.arrivals.bytesHeld() + (this.rawCopyIds.size + this.claims.size + this.tombstones.size) * 200 + this.readTimes.size * 16,
      diskBytes: this.spill.bytesOnDisk(),
    };
  }

  /**
   * The lane's waits that can be drained or stranded by `until`: those due by then, in order
   * (within a tier they are due in the order read, every message of a tier having its delay, so
   * the rest of the lane is not due yet), then the claimed ones due later on this watch's clock
   * (a watch that started later read the entry later; another claimed it, and a claim counts from
   * when it was read, not from when the wait is due). Stops when `visit` returns false.
   */
  private forEachDue(lane: number, until: number, visit: (wait: number) => boolean | void): void {
    let stopped = false;
    this.waits.forEach(lane, (wait) => {
      if (this.waits.value(wait, W_DUE) > until) return false;
      if (visit(wait) !== false) return true;
      stopped = true;
      return false;
    });
    if (stopped || this.claims.size === 0) return;
    for (const key of [...this.claims.keys()]) {
      const wait = this.waits.get(key);
      if (wait === undefined || this.waits.laneOf(wait) !== lane || this.waits.value(wait, W_DUE) <= until) continue;
      if (visit(wait) === false) return;
    }
  }

  private stranded(wait: number, now: number): boolean {
    const drainedAt = this.waits.value(wait, W_DRAINED);
    return !Number.isNaN(drainedAt) && now - drainedAt >= this.options.overdueAfterMs;
  }

  /** The winning copy id of the wait `key`, if one arrived. */
  private arrivedCopy(key: string): string | undefined {
    const arrival = this.arrivals.get(key);
    if (arrival === undefined) return undefined;
    if (Number.isNaN(this.arrivals.value(arrival, A_COPY))) return this.rawCopyIds.get(key) ?? '';
    for (let i = 0; i < 4; i++) this.words[i] = this.arrivals.value(arrival, A_COPY + i);
    return wordsToUuid(this.words, 0);
  }

  /** The copy id as the arrival columns hold it; kept as a string beside them when not a UUID. */
  private copyColumns(key: string, copyId: string): number[] {
    if (uuidToWords(copyId, this.words, 0)) return [this.words[0]!, this.words[1]!, this.words[2]!, this.words[3]!];
    this.rawCopyIds.set(key, copyId);
    return [NaN, NaN, NaN, NaN];
  }

  private deleteWait(key: string): void {
    const wait = this.waits.get(key);
    this.claims.delete(key);
    if (wait === undefined) return;
    const lane = this.waits.laneOf(wait);
    this.waits.delete(wait);
    if (this.spill.size > 0 && this.waits.count(lane) < this.window / 2 && this.spill.count(this.waits.laneName(lane)) > 0) this.refillLanes.add(lane);
  }

  /** A tier's wait goes to memory while its tier has room there and none of it waits on disk (the order must hold). */
  private addWait(queue: string, key: string, values: readonly number[]): void {
    const lane = this.waits.lane(queue);
    if (this.waits.count(lane) < this.window && this.spill.count(queue) === 0) {
      this.waits.add(lane, key, values);
      return;
    }
    if (this.spill.count(queue) === 0) this.spillFloors.set(queue, values[W_OFFSET]! - 1);
    this.spill.append(queue, key, values);
  }

  /** Every lane under half its window with waits on disk (after a restore, which reads no arrival). */
  private refillAll(): void {
    for (const queue of this.spill.lanes()) {
      const lane = this.waits.lane(queue);
      if (this.waits.count(lane) < this.window / 2) this.refillLanes.add(lane);
    }
    if (this.refillLanes.size > 0) this.refill();
  }

  /** Reads waits back from disk into the lanes that fell under half their window. */
  private refill(): void {
    for (const lane of this.refillLanes) {
      const queue = this.waits.laneName(lane);
      this.spill.take(queue, this.window - this.waits.count(lane), (key, values) => {
        this.spillFloors.set(queue, values[W_OFFSET]!);
        this.takeBack(lane, key, values);
      });
      if (this.spill.count(queue) === 0) this.spillFloors.delete(queue);
    }
    this.refillLanes.clear();
  }

  /** A wait read back from disk (or from a snapshot's parts) goes to memory unless it came back meanwhile. */
  private takeBack(lane: number, key: string, values: number[]): void {
    if (this.tombstones.delete(key) || this.arrivals.has(key)) return;
    const held = this.waits.get(key);
    if (held !== undefined) {
      // The same wait appended again: the later entry is the one it waits from.
      if (this.waits.value(held, W_OFFSET) >= values[W_OFFSET]!) return;
      this.deleteWait(key);
    }
    this.waits.add(lane, key, values);
  }

  /** A tombstone no wait on disk can match any longer: every tier's waits on disk were read after it. */
  private pruneTombstones(): void {
    if (this.tombstones.size === 0) return;
    if (this.spill.size === 0) return this.tombstones.clear();
    let floor = Infinity;
    for (const queue of this.spill.lanes()) floor = Math.min(floor, this.spillFloors.get(queue) ?? -1);
    for (const [key, offset] of this.tombstones) if (offset <= floor) this.tombstones.delete(key);
  }

  private get retentionMs(): number {
    return this.options.retentionMs ?? 7 * DAY_MS;
  }

  private apply(message: ConsumeMessage, offset: number): void {
    this.lastOffset = offset;
    this.readTimes.read(offset, this.clock());
    this.lastEntry = entryIdentity(message.properties.headers);
    this.appliedSinceSnapshot++;
    const headers = message.properties.headers ?? {};
    const key = headers[HEADERS.scheduleId];
    switch (headers[HEADERS.entryType]) {
      case JOURNAL_ENTRY_TYPES.scheduled:
        if (typeof key === 'string') this.applyScheduled(key, headers, offset);
        break;
      case JOURNAL_ENTRY_TYPES.arrived:
        if (typeof key === 'string') this.applyArrived(key, headers, offset);
        break;
      case JOURNAL_ENTRY_TYPES.recovery:
        this.applyClaim(headers, message.content);
        break;
      default:
        break;
    }
    if (this.refillLanes.size > 0) this.refill();
  }

  private applyScheduled(key: string, headers: Record<string, unknown>, offset: number): void {
    const queue = headers[HEADERS.retryQueue];
    if (typeof queue !== 'string') return;
    this.scheduledWaiters.settle(key, undefined);
    // Arrived before its scheduled entry landed (a slow append on another dispatcher): not waiting.
    if (this.arrivals.has(key)) return;
    const pointer = headers[HEADERS.bodyOffset];
    const bodyOffset = typeof pointer === 'number' && Number.isSafeInteger(pointer) ? pointer : offset;
    // The same wait appended again (its first append unconfirmed): it waits from this entry, at
    // the end of its tier, as it is due from now; no claim or drain of the first one carries over.
    this.deleteWait(key);
    this.addWait(queue, key, [offset, bodyOffset, this.clock() + this.delayOf(queue), NaN]);
  }

  /** A tier this watch does not know (the schedule changed): the longest delay, so never early. */
  private delayOf(queue: string): number {
    return this.options.tierDelaysMs[queue] ?? Math.max(0, ...Object.values(this.options.tierDelaysMs));
  }

  private applyArrived(key: string, headers: Record<string, unknown>, offset: number): void {
    const copyId = typeof headers[HEADERS.copyId] === 'string' ? (headers[HEADERS.copyId] as string) : '';
    let first = this.arrivedCopy(key);
    if (first === undefined) {
      first = copyId;
      const wait = this.waits.get(key);
      const recovered = this.claims.has(key);
      const lane = recovered ? RECOVERED : key.startsWith(RESEND_KEY) ? RESEND : RETRY;
      // The body offset stays known a while: the webhook's next wait points at it (bodyOffsetOf).
      const body = wait === undefined ? NaN : this.waits.value(wait, W_BODY);
      this.arrivals.add(this.arrivals.lane(lane), key, [this.clock(), body, ...this.copyColumns(key, copyId)]);
      if (wait === undefined && this.spill.size > 0) this.tombstones.set(key, offset);
      this.deleteWait(key);
    }
    const arrivalId = headers[HEADERS.claimId];
    if (typeof arrivalId === 'string') this.arrivalWaiters.settle(arrivalId, first);
  }

  /** A claim wins each wait still waiting whose current claim is the one it says it replaces. */
  private applyClaim(headers: Record<string, unknown>, content: Buffer): void {
    const claimId = headers[HEADERS.claimId];
    if (typeof claimId !== 'string') return;
    let body: { scheduleIds?: unknown; replaces?: unknown };
    try {
      body = JSON.parse(content.toString('utf8')) as typeof body;
    } catch {
      return;
    }
    const replaces = (body.replaces && typeof body.replaces === 'object' ? body.replaces : {}) as Record<string, unknown>;
    const won: string[] = [];
    const now = this.clock();
    for (const id of Array.isArray(body.scheduleIds) ? body.scheduleIds : []) {
      if (typeof id !== 'string') continue;
      const wait = this.waits.get(id);
      if (wait === undefined || this.claims.get(id)?.claimId !== replaces[id]) continue;
      this.claims.set(id, { claimId, readAt: now });
      // The copy may now wait in a backlog like anything else: a new drain must be seen.
      this.waits.setValue(wait, W_DRAINED, NaN);
      won.push(id);
    }
    this.claimWaiters.settle(claimId, won);
  }

  /** How many messages are ready in dispatch; undefined when it cannot be asked now. */
  private async dispatchReady(): Promise<number | undefined> {
    try {
      this.probe ??= this.broker.createChannel().then((channel) => {
        channel.on('error', () => {});
        channel.on('close', () => {
          this.probe = undefined;
        });
        return channel;
      });
      const channel = await this.probe;
      // A queue whose leader was just lost can leave the answer pending: a check must never hang,
      // or every later one (they run one at a time) waits behind it.
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('dispatch not checked in time')), PROBE_TIMEOUT_MS);
      });
      try {
        return (await Promise.race([channel.checkQueue(this.options.dispatch), timeout])).messageCount;
      } finally {
        clearTimeout(timer);
      }
    } catch {
      const probe = this.probe;
      this.probe = undefined;
      void probe?.then((channel) => channel.close()).catch(() => {});
      return undefined;
    }
  }

  /** Looks at dispatch, finds stranded waits, claims them, and puts back a copy of each one this watch won. */
  async check(): Promise<void> {
    if (this.stopped || !this.broker.isConnected) return;
    this.forgetExpired(this.clock());
    if (!this.ready) return;
    await this.maybeSnapshot();
    if (this.waits.size === 0) return;
    const askedAt = this.clock();
    const ready = await this.dispatchReady();
    if (ready === 0) {
      // Dispatch was empty: whatever was due before askedAt and came out of its tier has been consumed.
      for (const lane of this.waits.laneIds()) {
        this.forEachDue(lane, askedAt, (wait) => {
          if (!Number.isNaN(this.waits.value(wait, W_DRAINED))) return;
          const claim = this.claims.size === 0 ? undefined : this.claims.get(this.waits.keyOf(wait));
          if ((claim?.readAt ?? this.waits.value(wait, W_DUE)) <= askedAt) this.waits.setValue(wait, W_DRAINED, askedAt);
        });
      }
    }
    const now = this.clock();
    // The first stranded in the order read, across tiers, as many as a check takes.
    const max = this.options.maxPerCheck ?? 500;
    const found: Array<{ id: string; offset: number }> = [];
    for (const lane of this.waits.laneIds()) {
      let taken = 0;
      this.forEachDue(lane, now, (wait) => {
        if (!this.stranded(wait, now)) return;
        found.push({ id: this.waits.keyOf(wait), offset: this.waits.value(wait, W_OFFSET) });
        return ++taken < max;
      });
    }
    if (found.length === 0) return;
    const stranded = found
      .sort((a, b) => a.offset - b.offset)
      .slice(0, max)
      .map(({ id }) => id);
    const replaces: Record<string, string> = {};
    for (const id of stranded) {
      const claim = this.claims.get(id);
      if (claim) replaces[id] = claim.claimId;
    }
    const claimId = randomUUID();
    let won: string[];
    try {
      const readBack = this.claimWaiters.expect(claimId, 10_000, `recovery claim from ${this.stream}`);
      await appendRecoveryClaim(this.broker, this.stream, { claimId, scheduleIds: stranded, replaces }, 10_000);
      won = await readBack;
    } catch (err) {
      this.claimWaiters.forget(claimId);
      this.logger.warn('stranded retries not claimed; trying again at the next check', { stranded: stranded.length, error: (err as Error).message });
      return;
    }
    this.logger.info('stranded retries claimed', { stranded: stranded.length, won: won.length });
    await this.recover(won, claimId, now);
  }

  /**
   * Puts back a copy of each wait won: their entries read with one reader (a tier that failed
   * wholesale holds hundreds), the copies published side by side, each confirmed.
   */
  private async recover(scheduleIds: string[], claimId: string, now: number): Promise<void> {
    const waits = scheduleIds.flatMap((id): WaitCopy[] => {
      const wait = this.waits.get(id);
      if (wait === undefined) return []; // one that arrived while the claim was read back is done
      const value = (column: number) => this.waits.value(wait, column);
      return [{ scheduleId: id, queue: this.waits.laneName(this.waits.laneOf(wait)), offset: value(W_OFFSET), bodyOffset: value(W_BODY), dueAt: value(W_DUE) }];
    });
    if (waits.length === 0) return;
    let entries: Map<number, ConsumeMessage>;
    try {
      entries = await readEntriesAt(this.broker, this.stream, waits.flatMap((w) => [w.offset, w.bodyOffset]));
    } catch (err) {
      // The claim's lease runs out and the next check takes it over.
      this.logger.warn('stranded retries not recovered; trying again after the claim lease', { stranded: waits.length, error: (err as Error).message });
      return;
    }
    for (let i = 0; i < waits.length; i += RECOVER_IN_FLIGHT) {
      await Promise.all(waits.slice(i, i + RECOVER_IN_FLIGHT).map((wait) => this.recoverOne(wait, entries, claimId, now)));
    }
  }

  private async recoverOne(wait: WaitCopy, entries: Map<number, ConsumeMessage>, claimId: string, now: number): Promise<void> {
    const { scheduleId } = wait;
    const entry = entries.get(wait.offset);
    const body = entries.get(wait.bodyOffset);
    try {
      if (!entry || !body) throw new Error('its journal entry was not read (expired, or not reached in time)');
      if (body !== entry && !holdsBodyOf(body, entry)) throw new BodyOfAnotherWebhookError(wait.bodyOffset);
      const { properties } = entry;
      await publishCopy(this.broker, this.options.dispatch, { content: body.content, properties }, recoveredCopy(properties.headers ?? {}, claimId, randomUUID()), 10_000);
      this.stats.recovered++;
      this.logger.warn('retry recovered: its tier did not hand it back although dispatch drained', {
        queue: wait.queue,
        scheduleId,
        overdueMs: Math.round(now - wait.dueAt),
        merchantId: properties.headers?.[HEADERS.merchantId],
        webhookId: properties.headers?.[HEADERS.webhookId],
      });
    } catch (err) {
      if (err instanceof BodyOfAnotherWebhookError) {
        // No later check can do better: the body it needs is not in this journal.
        this.deleteWait(scheduleId);
        this.stats.unrecoverable++;
        const webhookId = entry?.properties.headers?.[HEADERS.webhookId];
        this.logger.warn('stranded retry cannot be recovered: its body pointer names another webhook', { queue: wait.queue, scheduleId, webhookId, bodyOffset: wait.bodyOffset });
        return;
      }
      // The claim's lease runs out and the next check takes it over.
      this.logger.warn('stranded retry not recovered; trying again after the claim lease', { queue: wait.queue, scheduleId, error: (err as Error).message });
    }
  }

  /** What retention removed from the journal cannot be recovered: stop counting it. */
  private forgetExpired(now: number): void {
    if (now - this.lastPruneAt < 60_000) return;
    this.lastPruneAt = now;
    const horizon = now - this.retentionMs;
    for (const lane of this.waits.laneIds()) {
      // In the order due: the first one not expired ends the lane's.
      for (let wait = this.waits.first(lane); wait !== undefined && this.waits.value(wait, W_DUE) < horizon; wait = this.waits.first(lane)) {
        const scheduleId = this.waits.keyOf(wait);
        this.deleteWait(scheduleId);
        this.logger.warn('waiting retry older than the journal retention forgotten', { queue: this.waits.laneName(lane), scheduleId });
      }
    }
    // A recovered wait's stuck original may still come out, as late as retention allows; a
    // resend's twin is published beside it; a retry's, after a lost confirm, waits with it.
    const remember = this.options.rememberArrivalsMs ?? REMEMBER_ARRIVALS_MS;
    const keepFor: Record<string, number> = { [RETRY]: remember, [RESEND]: Math.max(remember, DAY_MS), [RECOVERED]: Math.max(remember, this.retentionMs) };
    for (const lane of this.arrivals.laneIds()) {
      const until = now - keepFor[this.arrivals.laneName(lane)]!;
      for (let arrival = this.arrivals.first(lane); arrival !== undefined && this.arrivals.value(arrival, A_AT) < until; arrival = this.arrivals.first(lane)) {
        const key = this.late.size > 0 || Number.isNaN(this.arrivals.value(arrival, A_COPY)) ? this.arrivals.keyOf(arrival) : undefined;
        if (key !== undefined && this.late.has(key)) {
          // Still being appended again (keepScheduling): forgotten now, its entry landing later would be a wait that never ends.
          const values = Array.from({ length: ARRIVAL_COLUMNS }, (_, c) => this.arrivals.value(arrival!, c));
          this.arrivals.delete(arrival);
          this.arrivals.add(lane, key, [now, ...values.slice(1)]);
          continue;
        }
        if (key !== undefined) this.rawCopyIds.delete(key);
        this.arrivals.delete(arrival);
      }
    }
    // Read times past half the retention say only "too old to point at", as no sample does.
    this.readTimes.forgetBefore(now - this.retentionMs / 2);
    this.refillAll();
    this.pruneTombstones();
  }

  private async loadSnapshot(stream: string): Promise<WatchSnapshot | undefined> {
    let snapshot: WatchSnapshot | undefined;
    try {
      snapshot = await readLatestSnapshot(this.broker, stream);
    } catch (err) {
      this.logger.warn('retry watch snapshot not read; reading the whole journal', { error: (err as Error).message });
      return undefined;
    }
    if (!snapshot) return undefined;
    if (!(await this.journalHolds(snapshot.covers, snapshot.coversEntry))) {
      // The journal was deleted and declared again (or it cannot be read now): its offsets start
      // over, and a tail started past its end would never catch up, or, once the new journal has
      // grown past it, would skip its start and restore waits of the old one. Read it all instead.
      this.logger.warn('retry watch snapshot ignored: the journal does not hold the entry it covers', { covers: snapshot.covers });
      return undefined;
    }
    if (snapshot.v === 1) this.restoreV1(snapshot);
    else this.restore(snapshot);
    if (snapshot.v === 3) {
      try {
        await this.restoreSpilled(stream, snapshot);
      } catch (err) {
        this.clearState();
        this.logger.warn('retry watch snapshot ignored: its waits on disk were not all read; reading the whole journal', { covers: snapshot.covers, error: (err as Error).message });
        return undefined;
      }
    }
    this.lastOffset = snapshot.covers;
    this.lastEntry = snapshot.coversEntry;
    this.stats.restoredFromSnapshot = snapshot.v;
    this.logger.info('retry watch restored from a snapshot', { covers: snapshot.covers, version: snapshot.v, waiting: this.waits.size });
    return snapshot;
  }

  /** Columns as written: times as durations, turned into instants on this watch's clock. */
  private restore(snapshot: Extract<WatchSnapshot, { v: 2 | 3 }>): void {
    const now = this.clock();
    const rawOf = (list: Array<[number, number, string]>, lane: number) => new Map(list.filter(([l]) => l === lane).map(([, i, key]) => [i, key]));
    snapshot.waitLanes.forEach(({ name }, i) => {
      const { keys, columns } = snapshot.lanes.waits[i]!;
      const due = columns[W_DUE]!;
      const drained = columns[W_DRAINED]!;
      for (let r = 0; r < due.length; r++) {
        due[r] = now + due[r]!;
        drained[r] = now - drained[r]!; // NaN stays NaN
      }
      const raw = rawOf(snapshot.rawWaitKeys, i);
      // A snapshot of a watch that kept more in memory (one written before issue 29's window): the rest goes to disk.
      const held = Math.min(due.length, this.window);
      this.waits.importLane(this.waits.lane(name), keys.subarray(0, held * 4), columns.map((column) => column.subarray(0, held)), raw);
      for (let r = held; r < due.length; r++) {
        this.addWait(name, raw.get(r) ?? wordsToUuid(keys, r * 4), columns.map((column) => column[r]!));
      }
    });
    snapshot.arrivalLanes.forEach(({ name }, i) => {
      const { keys, columns } = snapshot.lanes.arrivals[i]!;
      const at = columns[A_AT]!;
      for (let r = 0; r < at.length; r++) at[r] = now - at[r]!;
      const rawKeys = rawOf(snapshot.rawArrivalKeys, i);
      this.arrivals.importLane(this.arrivals.lane(name), keys, columns, rawKeys);
      for (const [, index, copyId] of snapshot.rawCopyIds.filter(([l]) => l === i)) {
        this.rawCopyIds.set(rawKeys.get(index) ?? wordsToUuid(keys, index * 4), copyId);
      }
    });
    for (const [scheduleId, claimId, agoMs] of snapshot.claims) if (this.waits.has(scheduleId)) this.claims.set(scheduleId, { claimId, readAt: now - agoMs });
    for (const [offset, agoMs] of snapshot.readTimes) this.readTimes.read(offset, now - agoMs);
  }

  /** The waits a version 3 snapshot holds in parts: to memory while their tier has room there, else to disk. */
  private async restoreSpilled(stream: string, snapshot: WatchSnapshotV3): Promise<void> {
    const now = this.clock();
    for (const [key, offset] of snapshot.tombstones) this.tombstones.set(key, offset);
    await readSnapshotParts(this.broker, stream, snapshot, (queue, content) => {
      const { used } = this.spill.decode(content, (key, values) => {
        values[W_DUE] = now + values[W_DUE]!;
        values[W_DRAINED] = now - values[W_DRAINED]!; // NaN stays NaN
        // Into memory while its tier has room there (this watch keeps more than the writer did), as when read back from disk.
        const lane = this.waits.lane(queue);
        if (this.spill.count(queue) === 0 && this.waits.count(lane) < this.window) this.takeBack(lane, key, values);
        else this.addWait(queue, key, values);
      });
      if (used !== content.length) throw new Error(`a part of ${queue} ends inside a record`);
    });
    this.refillAll();
  }

  /** A snapshot written before version 2: the same state, as objects. */
  private restoreV1(snapshot: Extract<WatchSnapshot, { v: 1 }>): void {
    const now = this.clock();
    // In the order due, as each tier's lane must be (a wait appended again kept its first place in the Map).
    for (const [id, offset, bodyOffset, , queue, dueInMs, claimId, claimAgoMs] of [...snapshot.waits].sort((a, b) => a[5] - b[5])) {
      this.deleteWait(id);
      this.addWait(queue, id, [offset, bodyOffset, now + dueInMs, NaN]);
      if (claimId !== null) this.claims.set(id, { claimId, readAt: now - (claimAgoMs ?? 0) });
    }
    // Bodies were remembered by webhook: their read times, in offset order, are read-time samples.
    for (const [, offset, agoMs] of [...snapshot.bodies].sort((a, b) => a[1] - b[1] || b[2] - a[2])) this.readTimes.read(offset, now - agoMs);
    for (const [key, copyId, agoMs, recovered] of [...snapshot.arrivals].sort((a, b) => b[2] - a[2])) {
      if (this.arrivals.has(key)) continue;
      const lane = recovered ? RECOVERED : key.startsWith(RESEND_KEY) ? RESEND : RETRY;
      this.arrivals.add(this.arrivals.lane(lane), key, [now - agoMs, NaN, ...this.copyColumns(key, copyId)]);
    }
  }

  /**
   * True when the entry at `offset` is in the journal (the same entry, when the snapshot says
   * which), or was there and retention removed it.
   */
  private async journalHolds(offset: number, identity: string | undefined): Promise<boolean> {
    try {
      const entry = await readEntryAt(this.broker, this.stream, offset, 3_000);
      return identity === undefined || entryIdentity(entry.properties.headers) === identity;
    } catch (err) {
      return err instanceof EntryExpiredError;
    }
  }

  /** Every `everyEntries` entries (or `everyMs` with anything new), while caught up. */
  private async maybeSnapshot(): Promise<void> {
    const options = this.options.snapshots;
    if (!options || this.appliedSinceSnapshot === 0) return;
    const now = this.clock();
    if (this.appliedSinceSnapshot < (options.everyEntries ?? 100_000) && now - this.lastSnapshotAt < (options.everyMs ?? 600_000)) return;
    await this.writeSnapshot();
  }

  /** This watch's state now, times as durations from `now`, encoded (encodeSnapshotV2). */
  private snapshotOf(now: number, spilled?: Pick<WatchSnapshotV3, 'id' | 'parts' | 'startedAt' | 'spilled' | 'tombstones'>): Buffer {
    const waitLanes = this.waits.laneIds();
    const arrivalLanes = this.arrivals.laneIds();
    const bytes = [...waitLanes.map((l) => this.waits.laneBytes(l)), ...arrivalLanes.map((l) => this.arrivals.laneBytes(l))].reduce((a, b) => a + b, 0);
    return encodeSnapshotV2(bytes, (memory, start) => {
      let at = start;
      const write = (store: KeyedLanes, lanes: number[], columns: number, rawKeys: Array<[number, number, string]>) =>
        lanes.map((lane, i) => {
          const count = store.count(lane);
          for (const [index, key] of store.writeLane(lane, memory, at)) rawKeys.push([i, index, key]);
          const keys = new Uint32Array(memory, at, count * 4);
          const cols = Array.from({ length: columns }, (_, c) => new Float64Array(memory, at + count * 16 + c * count * 8, count));
          at += count * (16 + 8 * columns);
          return { keys, columns: cols } as WatchColumns;
        });
      const rawWaitKeys: Array<[number, number, string]> = [];
      const rawArrivalKeys: Array<[number, number, string]> = [];
      const waits = write(this.waits, waitLanes, WAIT_COLUMNS, rawWaitKeys);
      const arrivals = write(this.arrivals, arrivalLanes, ARRIVAL_COLUMNS, rawArrivalKeys);
      for (const { columns } of waits) {
        const due = columns[W_DUE]!;
        const drained = columns[W_DRAINED]!;
        for (let r = 0; r < due.length; r++) {
          due[r] = Math.round(due[r]! - now);
          drained[r] = Math.round(now - drained[r]!);
        }
      }
      const rawCopyIds: Array<[number, number, string]> = [];
      arrivals.forEach(({ keys, columns }, i) => {
        const at = columns[A_AT]!;
        const copy = columns[A_COPY]!;
        const raw = new Map(rawArrivalKeys.filter(([l]) => l === i).map(([, index, key]) => [index, key]));
        for (let r = 0; r < at.length; r++) {
          at[r] = Math.round(now - at[r]!);
          if (Number.isNaN(copy[r]!)) {
            const copyId = this.rawCopyIds.get(raw.get(r) ?? wordsToUuid(keys, r * 4));
            if (copyId !== undefined) rawCopyIds.push([i, r, copyId]);
          }
        }
      });
      return {
        ...(spilled ? { ...spilled, v: 3 as const } : { v: 2 as const }),
        covers: this.lastOffset,
        ...(this.lastEntry === undefined ? {} : { coversEntry: this.lastEntry }),
        waitLanes: waitLanes.map((lane, i) => ({ name: this.waits.laneName(lane), count: waits[i]!.keys.length / 4 })),
        arrivalLanes: arrivalLanes.map((lane, i) => ({ name: this.arrivals.laneName(lane), count: arrivals[i]!.keys.length / 4 })),
        rawWaitKeys,
        rawArrivalKeys,
        rawCopyIds,
        claims: [...this.claims].map(([id, claim]) => [id, claim.claimId, Math.round(now - claim.readAt)]),
        readTimes: this.readTimes.samples(now),
      };
    });
  }

  /** Writes this watch's state as of the last entry it read; the next start reads on from there. One at a time. */
  writeSnapshot(): Promise<void> {
    const options = this.options.snapshots;
    if (!options || this.lastOffset < 0) return Promise.resolve();
    this.snapshotting ??= this.writeSnapshotNow(options.stream).finally(() => {
      this.snapshotting = undefined;
    });
    return this.snapshotting;
  }

  private async writeSnapshotNow(stream: string): Promise<void> {
    const now = this.clock();
    const covers = this.lastOffset;
    const applied = this.appliedSinceSnapshot;
    this.appliedSinceSnapshot = 0;
    this.lastSnapshotAt = now;
    const spilled = this.spill.lanes().map((queue): [string, number] => [queue, this.spill.count(queue)]);
    // The waits on disk are copied part by part while the watch goes on: their files are held as they are meanwhile.
    this.spill.hold();
    let parts = 0;
    try {
      if (spilled.length === 0) {
        await appendSnapshot(this.broker, stream, this.snapshotOf(now), 30_000);
      } else {
        const id = randomUUID();
        parts = spilled.reduce((sum, [, count]) => sum + Math.ceil(count / SNAPSHOT_PART_RECORDS), 0);
        const ranges = spilled.map(([queue]) => ({ queue, ...this.spill.range(queue) }));
        const last = this.snapshotOf(now, { id, parts, startedAt: Date.now(), spilled, tombstones: [...this.tombstones] });
        let part = 0;
        for (const range of ranges) part = await this.writeParts(stream, id, part, range, now);
        if (part !== parts) throw new Error(`${part} parts written where ${parts} were counted`);
        await appendSnapshot(this.broker, stream, last, 30_000);
      }
      this.stats.snapshots++;
      this.logger.info('retry watch snapshot written', { covers, waiting: this.waits.size + this.spill.size, parts, ms: Math.round(this.clock() - now) });
    } catch (err) {
      this.appliedSinceSnapshot += applied;
      this.logger.warn('retry watch snapshot not written', { error: (err as Error).message });
    } finally {
      this.spill.release();
    }
  }

  /** The records of one tier's waits on disk, times as durations from `now`, in parts of SNAPSHOT_PART_RECORDS. */
  private async writeParts(stream: string, id: string, part: number, range: { queue: string; count: number; head: Buffer; from: number; to: number }, now: number): Promise<number> {
    let carry = range.head;
    let at = range.from;
    let out: Buffer[] = [];
    let written = 0;
    const flush = async () => {
      if (out.length === 0) return;
      written += out.length;
      await appendSnapshotPart(this.broker, stream, id, ++part, range.queue, Buffer.concat(out), 30_000);
      out = [];
    };
    for (;;) {
      const { used } = this.spill.decode(
        carry,
        (key, values) => {
          values[W_DUE] = Math.round(values[W_DUE]! - now);
          values[W_DRAINED] = Math.round(now - values[W_DRAINED]!);
          out.push(this.spill.encode(key, values));
        },
        SNAPSHOT_PART_RECORDS - out.length,
      );
      carry = carry.subarray(used);
      if (out.length >= SNAPSHOT_PART_RECORDS) {
        await flush();
        continue;
      }
      if (at >= range.to) break;
      const chunk = this.spill.read(range.queue, at, Math.min(1024 * 1024, range.to - at));
      if (chunk.length === 0) break;
      at += chunk.length;
      carry = carry.length === 0 ? chunk : Buffer.concat([carry, chunk]);
    }
    await flush();
    if (written !== range.count) throw new Error(`${written} waits of ${range.queue} read from disk where ${range.count} were counted`);
    return part;
  }
}
