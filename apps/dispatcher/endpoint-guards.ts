export interface EndpointGuardOptions {
  /** Requests in flight to one endpoint at most; the rest are deferred or wait. */
  maxInFlight: number;
  /** Consecutive failed attempts that open the circuit. */
  failureThreshold: number;
  /** How long an open circuit stays open before one probe is let through; doubles while probes fail. */
  cooldownMs: number;
  maxCooldownMs: number;
  now?: () => number;
}

export type Admission =
  | { kind: 'send'; release(succeeded: boolean): void }
  | { kind: 'busy' }
  | { kind: 'open'; failures: number };

interface EndpointState {
  inFlight: number;
  failures: number;
  openUntil: number;
  cooldownMs: number;
  probing: boolean;
  waiters: Array<() => void>;
}

/**
 * Per-endpoint bulkhead and circuit breaker, so one merchant whose server hangs or fails cannot
 * take the dispatcher's connections and prefetch slots from the others.
 */
export class EndpointGuards {
  private readonly endpoints = new Map<string, EndpointState>();
  private readonly now: () => number;

  constructor(private readonly options: EndpointGuardOptions) {
    this.now = options.now ?? Date.now;
  }

  admit(endpoint: string): Admission {
    const state = this.state(endpoint);
    if (state.openUntil > 0) {
      if (this.now() < state.openUntil || state.probing) return { kind: 'open', failures: state.failures };
      state.probing = true; // half-open: this one delivery probes the endpoint
      return this.send(state, true);
    }
    if (state.inFlight >= this.options.maxInFlight) return { kind: 'busy' };
    return this.send(state, false);
  }

  /** Waits until the endpoint has a free slot or its circuit opens. */
  async admitWhenFree(endpoint: string, stopped: () => boolean): Promise<Exclude<Admission, { kind: 'busy' }> | undefined> {
    for (;;) {
      if (stopped()) return undefined;
      const admission = this.admit(endpoint);
      if (admission.kind !== 'busy') return admission;
      await new Promise<void>((resolve) => this.state(endpoint).waiters.push(resolve));
    }
  }

  /** Wakes every delivery waiting for a slot, so a stopping dispatcher can hand them back. */
  wakeAll(): void {
    for (const state of this.endpoints.values()) for (const wake of state.waiters.splice(0)) wake();
  }

  /** When the endpoint's open circuit lets a probe through; 0 when closed. */
  openUntil(endpoint: string): number {
    return this.endpoints.get(endpoint)?.openUntil ?? 0;
  }

  private send(state: EndpointState, probe: boolean): Admission {
    state.inFlight++;
    let released = false;
    return {
      kind: 'send',
      release: (succeeded) => {
        if (released) return;
        released = true;
        state.inFlight--;
        if (probe) state.probing = false;
        if (succeeded) {
          state.failures = 0;
          state.openUntil = 0;
          state.cooldownMs = this.options.cooldownMs;
        } else {
          state.failures++;
          if (probe) {
            state.cooldownMs = Math.min(state.cooldownMs * 2, this.options.maxCooldownMs);
            state.openUntil = this.now() + state.cooldownMs;
          } else if (state.failures >= this.options.failureThreshold && state.openUntil === 0) {
            state.openUntil = this.now() + state.cooldownMs;
          }
        }
        state.waiters.shift()?.();
      },
    };
  }

  private state(endpoint: string): EndpointState {
    let state = this.endpoints.get(endpoint);
    if (!state) {
      state = { inFlight: 0, failures: 0, openUntil: 0, cooldownMs: this.options.cooldownMs, probing: false, waiters: [] };
      this.endpoints.set(endpoint, state);
    }
    return state;
  }
}

/** Endpoints are servers: two merchants on one host share its capacity and its outages. */
export function endpointOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}
