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
