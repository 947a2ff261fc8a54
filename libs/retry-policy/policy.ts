import { retryAfterMs } from './retry-after.js';

/** Times a delivery is set aside for a busy endpoint, by default, before it waits for a slot instead. */
export const MAX_DEFERRALS = 20;

export interface RetryPolicySettings {
  /** One delay per retry tier (RETRY_SCHEDULE); empty: a single attempt. */
  delaysMs: readonly number[];
  /** Times a delivery is set aside for a busy endpoint before it waits for a slot instead. */
  maxDeferrals?: number;
}

/**
 * The retry policy in one place: which tier a webhook waits in after a failed attempt (Retry-After
 * included), when a busy endpoint sets it aside, where an open circuit postpones it, and when its
 * schedule is over. Tiers are queues whose TTL is their delay (libs/topology declares them from the
 * same schedule), so a policy only ever picks a tier: it never invents a delay.
 */
export class RetryPolicy {
  readonly delaysMs: readonly number[];
  /** The schedule's total span: how long a webhook may wait, postponements included, before it fails. */
  readonly spanMs: number;
  private readonly maxDeferrals: number;

  constructor(settings: RetryPolicySettings) {
    this.delaysMs = settings.delaysMs;
    this.spanMs = settings.delaysMs.reduce((sum, delay) => sum + delay, 0);
    this.maxDeferrals = settings.maxDeferrals ?? MAX_DEFERRALS;
  }

  /** True once every attempt of the schedule was made: `attempt` counts from 1. */
  exhausted(attempt: number): boolean {
    return attempt - 1 >= this.delaysMs.length;
  }

  /** True when the span since the webhook was first seen (or resent) is over. */
  spanOver(startedAt: string, now: Date): boolean {
    return now.getTime() - Date.parse(startedAt) >= this.spanMs;
  }

  canDefer(deferrals: number): boolean {
    return this.delaysMs.length > 0 && deferrals < this.maxDeferrals;
  }

  /**
   * The tier after attempt `attempt` failed; a Retry-After on 429 or 503 moves it to the first tier
   * that waits at least that long, never beyond the last: the schedule bounds how long anything waits.
   */
  tierAfterFailure(attempt: number, failure: { status?: number; retryAfter?: string }, now: Date): number {
    const tier = attempt - 1;
    const delays = this.delaysMs;
    if (failure.status !== 429 && failure.status !== 503) return tier;
    const wanted = retryAfterMs(failure.retryAfter, now);
    if (wanted === undefined || wanted <= delays[tier]!) return tier;
    for (let i = tier; i < delays.length; i++) if (delays[i]! >= wanted) return i;
    return delays.length - 1;
  }

  /** A busy endpoint: wait in the tier the webhook would wait in anyway. */
  deferTier(attempts: number): number {
    return Math.min(attempts, this.delaysMs.length - 1);
  }

  /** An open circuit: the first tier that outlasts its cooldown. */
  postponeTier(retryInMs: number): number {
    const tier = this.delaysMs.findIndex((delay) => delay >= retryInMs);
    return tier < 0 ? this.delaysMs.length - 1 : tier;
  }

  delayOf(tier: number): number {
    return this.delaysMs[tier]!;
  }
}
