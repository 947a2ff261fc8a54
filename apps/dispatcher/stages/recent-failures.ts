/**
 * An endpoint's last answers as one dispatcher saw them, newest in the lowest bit (1: failed), up to
 * `size` (at most 30) of them. Five failures in a row alone opened the circuit of an endpoint that
 * fails one request in ten at random every few seconds at a high rate (0.1⁵ a place, thousands of
 * places a second), holding all its webhooks for a cooldown each time; most of its recent answers
 * failing too is what tells a dead endpoint from such a flaky one.
 */
/** Answers kept by default: at least half of them failed, with the threshold's last in a row, open the circuit. */
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
