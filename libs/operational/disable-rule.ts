/**
 * The auto-disable rule (ENDPOINT_DISABLE_AFTER), pure: an endpoint whose every attempt has failed
 * for `afterMs`, counted from its first failure after its last success, with its failures spread
 * over at least a tenth of that (a burst of failures followed by silence is not a dead endpoint).
 */
export function shouldDisable(failingSince: number, lastFailureAt: number, now: number, afterMs: number): boolean {
  if (!(afterMs > 0) || !Number.isFinite(failingSince)) return false;
  return now - failingSince >= afterMs && lastFailureAt - failingSince >= afterMs / 10;
}

/**
 * When a dispatcher writes an endpoint's failing clock into the directory: once its own failures
 * have lasted a tenth of ENDPOINT_DISABLE_AFTER without a success. An endpoint that fails now and
 * then (a flapping one) never gets there, so it writes nothing to the merchants stream.
 */
export function shouldRecordFailing(localSince: number, now: number, afterMs: number): boolean {
  return afterMs > 0 && now - localSince >= afterMs / 10;
}

/**
 * An endpoint's failing clock as the directory holds it, at a failed attempt `now`:
 * - `none`: no clock;
 * - `stale`: no failure recorded for two tenths of ENDPOINT_DISABLE_AFTER (the endpoint had no
 *   traffic, or the dispatchers were down): the failures it counted are history, not a run of
 *   failures up to now, and a new clock must start;
 * - `due`: failing for ENDPOINT_DISABLE_AFTER, failures spread over a tenth of it: disable;
 * - `refresh`: running, and its last recorded failure is a tenth old: record this one;
 * - `running`.
 * The dispatchers' attempts (retries hours apart, circuit probes) keep a dead endpoint's failures
 * well within two tenths (the default 5d gives 24 h, the longest default retry delay is 10 h).
 */
export function clockState(failingSince: number | undefined, lastFailureAt: number | undefined, now: number, afterMs: number): 'none' | 'stale' | 'due' | 'refresh' | 'running' {
  if (failingSince === undefined || !Number.isFinite(failingSince)) return 'none';
  const last = lastFailureAt !== undefined && Number.isFinite(lastFailureAt) ? Math.max(lastFailureAt, failingSince) : failingSince;
  if (now - last > afterMs / 5) return 'stale';
  if (shouldDisable(failingSince, now, now, afterMs)) return 'due';
  return now - last >= afterMs / 10 ? 'refresh' : 'running';
}
