/** Every attempt failed for `afterMs` since the last success, the failures spread over a tenth of it (not one burst). */
export function shouldDisable(failingSince: number, lastFailureAt: number, now: number, afterMs: number): boolean {
  if (!(afterMs > 0) || !Number.isFinite(failingSince)) return false;
  return now - failingSince >= afterMs && lastFailureAt - failingSince >= afterMs / 10;
}

/** A dispatcher writes the failing clock once its own failures last a tenth of it: a flapping endpoint writes nothing. */
export function shouldRecordFailing(localSince: number, now: number, afterMs: number): boolean {
  return afterMs > 0 && now - localSince >= afterMs / 10;
}

/**
 * An endpoint's failing clock at a failed attempt `now`: `stale` when no failure was recorded for two tenths
 * of ENDPOINT_DISABLE_AFTER (a new clock starts), `due` to disable, `refresh` when its last failure is a tenth old.
 */
export function clockState(failingSince: number | undefined, lastFailureAt: number | undefined, now: number, afterMs: number): 'none' | 'stale' | 'due' | 'refresh' | 'running' {
  if (failingSince === undefined || !Number.isFinite(failingSince)) return 'none';
  const last = lastFailureAt !== undefined && Number.isFinite(lastFailureAt) ? Math.max(lastFailureAt, failingSince) : failingSince;
  if (now - last > afterMs / 5) return 'stale';
  if (shouldDisable(failingSince, now, now, afterMs)) return 'due';
  return now - last >= afterMs / 10 ? 'refresh' : 'running';
}
