import { isPartitionMissing, isRolledBack, isTransient } from '../delivery-store/refusals.js';
import type { Logger } from '../logger/index.js';
import { throttledWarning } from '../runtime/batcher.js';
import { Periodic } from '../runtime/periodic.js';
import { within } from '../runtime/timers.js';
import type { IntakeKey, IntakeKeyStore, KeyNote, KeyStates } from './store.js';

/**
 * `changed`: a repeat whose body differs from its key's first; `unchecked`: PostgreSQL did not answer, delivered;
 * `carried`: a later copy of a key another copy of its batch goes on with (dropped without asking the log, which
 * holds nothing yet of the copy that goes on).
 */
export type Sight = 'first' | 'repeat' | 'changed' | 'unchecked' | 'carried';

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

const MAINTAIN_EVERY_MS = 3_600_000;

/** Each on its own connection (the dispatcher's pool for keys has two): a batch waits for one round trip at most. */
const MAX_STATEMENTS = 2;

/** Best effort: a long outage drops notes rather than grow. */
const MAX_NOTES = 100_000;

/** Batches the intake checks, never holding intake: one PostgreSQL does not answer lets every check go on unchecked a while. */
export class IntakeChecker {
  private next: Check[] = [];
  private notes: KeyNote[] = [];
  private running = 0;
  private starting = false;
  private restUntil = 0;
  /** Answers go out in the order the checks came, or a message could overtake an earlier one of its reference. */
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

  /** One upkeep at a time (a check that finds today's partition missing asks too, and waits for it). */
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

  /** A key seen before is a repeat, unless a redelivered copy, with its first's body, of a webhook the log holds no record of. */
  check(key: IntakeKey, redelivered: boolean): Promise<Sight> {
    if (this.resting()) return this.answered.then(() => 'unchecked');
    return new Promise<Sight>((done) => {
      this.next.push({ key, redelivered, done });
      this.startSoon();
    });
  }

  /** Of a redelivered repeat, the endpoints the log holds no delivery for (all when PostgreSQL does not answer). */
  async unrecorded(key: IntakeKey, endpointIds: readonly string[], legacyEndpointId?: string): Promise<string[]> {
    try {
      const recorded = new Set((await within(this.timeoutMs, this.store.recordedEndpoints(key), 'reject')).map((id) => (id === '' ? legacyEndpointId : id)));
      return endpointIds.filter((id) => !recorded.has(id));
    } catch {
      return [...endpointIds];
    }
  }

  /** At the turn's end: one socket read's messages reach check() in one turn, and go together. */
  private startSoon(): void {
    if (this.starting || this.running >= MAX_STATEMENTS) return;
    this.starting = true;
    setImmediate(() => {
      this.starting = false;
      if (this.running < MAX_STATEMENTS && this.next.length > 0) void this.drain();
    });
  }

  /** A repeat the dispatcher dropped, counted with the next batch (not every repeat sight is dropped: `unrecorded`). */
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
      // Queued while a statement failed: unchecked now, not after a second deadline.
      const resting = this.resting();
      const batch = this.next;
      const notes = resting ? [] : this.notes;
      this.next = [];
      if (!resting) this.notes = [];
      const before = this.answered;
      let answered!: () => void;
      this.answered = new Promise<void>((resolve) => (answered = resolve));
      // Each key once in the statement: later copies of it in the batch find it taken.
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
      const states = resting ? undefined : await this.checked(keys, notes, batch.length);
      await before;
      // One copy of a key per batch goes on: two redelivered copies of an unsettled key are not both first.
      const goneOn = new Set<number>();
      batch.forEach(({ redelivered, done }, i) => {
        const copy = copies[i]!;
        const sight = sightOf(copy, redelivered, states);
        if (sight !== 'first') return done(sight);
        if (goneOn.has(copy.place)) return done('carried');
        goneOn.add(copy.place);
        done(sight);
      });
      answered();
    }
    this.running--;
    // A check queued while the loop ended (stopped) is let through, never held.
    if (this.stopped) for (const { done } of this.next.splice(0)) done('unchecked');
  }

  /**
   * The batch's states; undefined: unchecked. Tried again at once, within the same deadline, after a
   * deadlock (an outside transaction's) or a day with no partition (made first): resting on those, a
   * dispatcher delivered every repeat for 10 s. Again without the notes: counted before the check, they would
   * count twice (lost if their own statement failed, as in an outage).
   */
  private async checked(keys: IntakeKey[], notes: KeyNote[], messages: number): Promise<KeyStates | undefined> {
    const again = async (err: unknown) => {
      if (isPartitionMissing(err)) await this.maintain();
      else if (!isRolledBack(err)) throw err;
      return this.store.check(keys);
    };
    try {
      return await within(this.timeoutMs, this.store.check(keys, notes).catch(again), 'reject');
    } catch (err) {
      // Only an outage rests: a refusal costs its own batch, and the next one is asked.
      const outage = isTransient(err) && !isRolledBack(err);
      if (outage) this.restUntil = performance.now() + this.restMs;
      const what = outage ? 'PostgreSQL did not answer' : 'PostgreSQL refused it';
      this.problem(`intake check skipped: ${what}; messages are delivered without it (a repeat may be delivered again)`, err, { messages, code: (err as { code?: unknown })?.code });
      return undefined;
    }
  }
}

/** `place`: its key's index in the statement; `later`: a later copy of a key in the batch, whose body `differs`. */
function sightOf({ place, later, differs }: { place: number; later: boolean; differs: boolean }, redelivered: boolean, states: KeyStates | undefined): Sight {
  if (!states) return 'unchecked';
  if (!later && !states.repeats.has(place)) return 'first';
  // A body unlike its key's first is no redelivery of the first copy, whatever the log holds.
  const changed = differs || (!later && states.changed.has(place));
  if (redelivered && !changed && !states.recorded.has(place)) return 'first';
  return changed ? 'changed' : 'repeat';
}
