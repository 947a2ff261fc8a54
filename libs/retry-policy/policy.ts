import { retryAfterMs } from './retry-after.js';

/** Times a delivery is set aside for a busy endpoint, by default, before it waits for a slot instead. */
export const MAX_DEFERRALS = 20;

/** The retry policy in one place. It only ever picks a step of the schedule: it never invents a delay. */
export class RetryPolicy {
  /** One delay per retry step (RETRY_SCHEDULE); empty: a single attempt. */
  readonly delaysMs: readonly number[];
  /** The schedule's total span: how long a webhook may wait, postponements included, before it fails. */
  readonly spanMs: number;
  private readonly maxDeferrals: number;

  constructor(settings: { delaysMs: readonly number[]; maxDeferrals?: number }) {
    this.delaysMs = settings.delaysMs;
    this.spanMs = settings.delaysMs.reduce((sum, delay) => sum + delay, 0);
    this.maxDeferrals = settings.maxDeferrals ?? MAX_DEFERRALS;
  }

  /** True once every attempt of the schedule was made: `attempt` counts from 1. */
  exhausted(attempt: number): boolean {
    return attempt - 1 >= this.delaysMs.length;
  }

  /**
   * True when the span since the webhook was first seen (or resent) is over; always, with a single
   * attempt (no schedule: nothing can wait for a later one). Else a dispatcher whose clock is behind
   * the one that stamped `startedAt` (another dispatcher's, PostgreSQL's) found a span of 0 not over,
   * and postponed for an open circuit to a step the schedule does not have (no delay: its wait refused).
   */
  spanOver(startedAt: string, now: Date): boolean {
    return this.delaysMs.length === 0 || this.spanLeftMs(startedAt, now) <= 0;
  }

  /** Time left until that span is over (≤ 0 once it is). */
  spanLeftMs(startedAt: string, now: Date): number {
    return this.spanMs - (now.getTime() - Date.parse(startedAt));
  }

  canDefer(deferrals: number): boolean {
    return this.delaysMs.length > 0 && deferrals < this.maxDeferrals;
  }

  /** Deferrals spent, but it can still wait as a row: set aside only past a longer line. */
  deferralsSpent(deferrals: number): boolean {
    return this.delaysMs.length > 0 && deferrals >= this.maxDeferrals;
  }

  /**
   * The step after attempt `attempt` failed; a Retry-After on 429 or 503 moves it to the first step
   * that long, never past the last (`date`: the response's Date header, from which an HTTP date counts).
   */
  stepAfterFailure(attempt: number, failure: { status?: number; retryAfter?: string; date?: string }, now: Date): number {
    const step = attempt - 1;
    const delays = this.delaysMs;
    if (failure.status !== 429 && failure.status !== 503) return step;
    const wanted = retryAfterMs(failure.retryAfter, now, failure.date);
    if (wanted === undefined || wanted <= delays[step]!) return step;
    for (let i = step; i < delays.length; i++) if (delays[i]! >= wanted) return i;
    return delays.length - 1;
  }

  /** A busy endpoint: the first delay, whatever the attempts (busy is not failing; later steps could outlast the span). */
  deferStep(): number {
    return 0;
  }

  /** An open circuit: the first step that outlasts its cooldown. */
  postponeStep(retryInMs: number): number {
    const step = this.delaysMs.findIndex((delay) => delay >= retryInMs);
    return step < 0 ? this.delaysMs.length - 1 : step;
  }

  delayOf(step: number): number {
    return this.delaysMs[step]!;
  }
}
