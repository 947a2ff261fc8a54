import { z } from 'zod';

/**
 * The webhook's throttle, `maxPerSecond` (issue 55): at most this many webhooks a second to the
 * endpoint, whatever the number of dispatchers; absent, no limit. Kept in one file so that the
 * setting moves whole when a merchant's webhook settings move onto its endpoints (issue 56).
 */

/** The highest throttle one can set; above it, leave the throttle unset. */
export const MAX_PER_SECOND_LIMIT = 10_000;

export const maxPerSecondField = z
  .number({ error: 'must be a whole number of webhooks per second' })
  .int('must be a whole number of webhooks per second')
  .min(1, 'must be at least 1')
  .max(MAX_PER_SECOND_LIMIT, `must be at most ${MAX_PER_SECOND_LIMIT} (leave it out for no limit)`);

interface Throttled {
  maxPerSecond?: number;
}

/** The configured throttle, null when none. */
export function maxPerSecondOf(webhook: Throttled): number | null {
  return webhook.maxPerSecond ?? null;
}

/** The webhook with the throttle an input says: a number sets it; null or undefined (a PUT leaving it out) removes it. */
export function withMaxPerSecond<T extends Throttled>(webhook: T, maxPerSecond: number | null | undefined): T {
  const { maxPerSecond: _old, ...rest } = webhook;
  return (maxPerSecond == null ? rest : { ...rest, maxPerSecond }) as T;
}
