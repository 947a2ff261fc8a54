/**
 * An endpoint's last answers, newest in the lowest bit (1: failed), up to `size` (at most 30): most
 * of them failing, besides the threshold's failures in a row, tells a dead endpoint from a flaky one.
 */
/** Answers kept by default. */
export const ANSWERS_KEPT = 20;

export interface RecentAnswers {
  bits: number;
  seen: number;
}

export function noteAnswer(recent: RecentAnswers, failed: boolean, size: number): void {
  recent.bits = ((recent.bits << 1) | (failed ? 1 : 0)) & ((1 << size) - 1);
  recent.seen = Math.min(recent.seen + 1, size);
}

/** At least half of the answers held failed (of those seen, for an endpoint seen fewer times than `size`). */
export function mostlyFailed(recent: RecentAnswers): boolean {
  let failed = 0;
  for (let bits = recent.bits; bits !== 0; bits &= bits - 1) failed++;
  return 2 * failed >= recent.seen;
}
