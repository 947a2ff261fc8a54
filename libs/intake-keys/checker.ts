import type { Logger } from '../logger/index.js';
import { throttledWarning } from '../runtime/batcher.js';
import { Periodic } from '../runtime/periodic.js';
import { withDeadline } from '../runtime/timers.js';
import type { IntakeKey, IntakeKeyStore, KeyNote, KeyStates } from './store.js';

/**
 * `first`: a new key, delivered; `repeat`: seen in the window, acked undelivered; `changed`: a
 * repeat whose body differs from the one its key was first seen with; `unchecked`: PostgreSQL did
 * not answer, delivered.
 */
export type Sight = 'first' | 'repeat' | 'changed' | 'unchecked';

export interface IntakeCheckerOptions {
  timeoutMs?: number;
  restMs?: number;
}

interface Check {
  key: IntakeKey;
  redelivered: boolean;
  done: (sight: Sight) => void;
}

/** How long a check may take before its messages go on unchecked; then how long every check is skipped. */
export const INTAKE_CHECK_TIMEOUT_MS = 2_000;
export const INTAKE_CHECK_REST_MS = 10_000;

/** Between partition upkeeps (today's and tomorrow's made, expired ones dropped); 30 s after one failed. */
const MAINTAIN_EVERY_MS = 3_600_000;

/** Statements at once, each on its own connection (the dispatcher's pool for keys has two). */
const MAX_STATEMENTS = 2;

/** Notes held at most: best effort, so a long outage drops them rather than grow. */
const MAX_NOTES = 100_000;

/**
 * Batches the intake checks: what queued while a statement ran goes in the next one, with the
 * repeats dropped since (to count on their keys). Never holds intake for PostgreSQL: a check that
 * fails or takes over `timeoutMs` lets its messages go on unchecked, and every check for `restMs`.
 */
export class IntakeChecker {
  private next: Check[] = [];
  private notes: KeyNote[] = [];
  /** At most MAX_STATEMENTS, so a batch waits for one round trip at most, not two. */
  private running = 0;
  /** A statement is due at the end of this turn (startSoon). */
  private starting = false;
  private restUntil = 0;
  /**
   * Settles when the last batch taken has handed out its answers: answers go out in the order the
   * checks came, though two statements run at once, or a message could overtake an earlier one of
   * its reference to the order gate.
   */
  private answered: Promise<void> = Promise.resolve();
  private readonly problem = throttledWarning((message, fields) => this.logger.warn(message, fields));
  private stopped = false;
  private maintaining?: Promise<number | undefined>;
  private readonly upkeep = new Periodic(() => this.maintain(), () => MAINTAIN_EVERY_MS);
  private readonly timeoutMs: number;
  private readonly restMs: number;

  constructor(
    private readonly store: IntakeKeyStore,
    private readonly logger: Logger,
    options: IntakeCheckerOptions = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? INTAKE_CHECK_TIMEOUT_MS;
    this.restMs = options.restMs ?? INTAKE_CHECK_REST_MS;
  }

  /** Makes the partitions, awaited (a failure is logged, not thrown), then again and again until stop(). */
  async start(): Promise<void> {
    if (!this.stopped) await this.upkeep.start();
  }

  /** The partitions made and dropped, one upkeep at a time (a check that finds today's missing asks too); after a failure, the next in 30 s. */
  private maintain(): Promise<number | undefined> {
    this.maintaining ??= (async () => {
      try {
        const { dropped } = await this.store.maintain();
        if (dropped.length > 0) this.logger.info('intake key partitions dropped', { dropped });
        return undefined;
      } catch (err) {
        this.logger.warn('intake key partitions not kept up; tried again in 30 s', { error: (err as Error)?.message });
        return 30_000;
      } finally {
        this.maintaining = undefined;
      }
    })();
    return this.maintaining;
  }

  stop(): void {
    this.stopped = true;
    void this.upkeep.stop();
  }

  /**
   * First sight, or a repeat? A key seen before is a repeat unless this copy is a redelivery
   * (`redelivered`) and the delivery log holds no record of its webhook: then it may be the first
   * delivery's own copy, back after a dispatcher died before its ack, and it goes on.
   */
  check(key: IntakeKey, redelivered: boolean): Promise<Sight> {
    if (this.resting()) return this.answered.then(() => 'unchecked');
    return new Promise<Sight>((done) => {
      this.next.push({ key, redelivered, done });
      this.startSoon();
    });
  }

  /**
   * Of a redelivered repeat, the endpoints whose delivery the log does not hold (a dispatcher died
   * mid-fan-out); all of them when PostgreSQL does not answer. A log row written before endpoints
   * ('') is the delivery of `legacyEndpointId`, the endpoint the merchant's one webhook became.
   */
  async unrecorded(key: IntakeKey, endpointIds: readonly string[], legacyEndpointId?: string): Promise<string[]> {
    try {
      const recorded = new Set((await withDeadline(this.store.recordedEndpoints(key), this.timeoutMs)).map((id) => (id === '' ? legacyEndpointId : id)));
      return endpointIds.filter((id) => !recorded.has(id));
    } catch {
      return [...endpointIds];
    }
  }

  /** A statement for what queued, at the turn's end: one socket read's messages reach check() in one turn, and go together. */
  private startSoon(): void {
    if (this.starting || this.running >= MAX_STATEMENTS) return;
    this.starting = true;
    setImmediate(() => {
      this.starting = false;
      if (this.running < MAX_STATEMENTS && this.next.length > 0) void this.drain();
    });
  }

  /**
   * A repeat the dispatcher dropped: counted on its key's row with the next batch (the log's
   * `duplicates`). Said by the dispatcher, not taken from the sight: a redelivered repeat may still
   * go to an endpoint the log does not hold (`unrecorded`), and that copy is no duplicate.
   */
  dropped(note: KeyNote): void {
    if (this.notes.length < MAX_NOTES) this.notes.push(note);
    if (this.running === 0 && !this.resting()) void this.drain();
  }

  private resting(): boolean {
    return performance.now() < this.restUntil;
  }

  private async drain(): Promise<void> {
    this.running++;
    // Notes alone wait out a rest: no statement for them while PostgreSQL is not answering.
    while ((this.next.length > 0 || (this.notes.length > 0 && !this.resting())) && !this.stopped) {
      // Queued while a statement failed: the rest has begun, and they go on unchecked now. Given a
      // statement of their own, they waited out a second deadline behind PostgreSQL not answering.
      const resting = this.resting();
      const batch = this.next;
      const notes = resting ? [] : this.notes;
      this.next = [];
      if (!resting) this.notes = [];
      const before = this.answered;
      let answered!: () => void;
      this.answered = new Promise<void>((resolve) => (answered = resolve));
      // Each key once in the statement: the first copy of a key in the batch takes its state, the next ones find it taken.
      const places = new Map<string, number>();
      const keys: IntakeKey[] = [];
      const copies = batch.map(({ key }) => {
        const id = `${key.merchantId}\u001f${key.webhookId}`;
        const place = places.get(id);
        if (place === undefined) {
          places.set(id, keys.push(key) - 1);
          return { place: keys.length - 1, later: false, differs: false };
        }
        const first = keys[place]!;
        return { place, later: true, differs: key.digest !== undefined && first.digest !== undefined && !key.digest.equals(first.digest) };
      });
      let states: KeyStates | undefined;
      try {
        if (!resting) states = await withDeadline(this.store.check(keys, notes), this.timeoutMs);
      } catch (err) {
        this.restUntil = performance.now() + this.restMs;
        this.problem('intake check skipped: PostgreSQL did not answer; messages are delivered without it (a repeat may be delivered again)', err, { messages: batch.length });
        // No partition for today's key (the day turned before its partition was made): made now.
        if ((err as { code?: string })?.code === '23514') void this.maintain();
      }
      await before;
      batch.forEach(({ redelivered, done }, i) => done(sightOf(copies[i]!, redelivered, states)));
      answered();
    }
    this.running--;
    // A check queued while the loop ended (stopped) is let through, never held.
    if (this.stopped) for (const { done } of this.next.splice(0)) done('unchecked');
  }
}

/**
 * A copy's sight from its batch's states: `place` is its key's index in the statement; `later`, a
 * later copy of a key already in the batch (never the first sight), whose body `differs` from the first copy's.
 */
function sightOf({ place, later, differs }: { place: number; later: boolean; differs: boolean }, redelivered: boolean, states: KeyStates | undefined): Sight {
  if (!states) return 'unchecked';
  if (!later && !states.repeats.has(place)) return 'first';
  // A redelivery of a key whose webhook the log does not hold: maybe the first delivery's own copy.
  if (redelivered && !states.recorded.has(place)) return 'first';
  return differs || (!later && states.changed.has(place)) ? 'changed' : 'repeat';
}
