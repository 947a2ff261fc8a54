import { circuitOf, endpointKey, endpointLabel } from './endpoint-key.js';

export interface EndpointGuardOptions {
  maxInFlight: number;
  /** DISPATCH_CONCURRENCY; unbounded when absent. */
  maxTotalInFlight?: number;
  /** Per endpoint id, across its URLs: a per-URL bound alone gives an endpoint whose URL changes one share per URL. */
  maxPerMerchant?: number;
  failureThreshold: number;
  /** Answers remembered per endpoint (at most 30; default ANSWERS_KEPT). */
  failureWindow?: number;
  /** Before its row's probe; doubles while probes fail. */
  cooldownMs: number;
  maxCooldownMs: number;
  /** Past it, the least recently used idle endpoints with a closed circuit are forgotten. */
  maxEndpoints?: number;
  now?: () => number;
}

/**
 * `rejected` (a 4xx other than 408 and 429) counts as reachable: the breaker guards against endpoints
 * that are down or slow. `unused`: the slot given back unsent; breaker and latency untouched.
 */
export type AttemptResult = 'succeeded' | 'failed' | 'rejected' | 'unused';

export type Admission =
  /** `release` returns the cooldown its failure opens the circuit's row for (0: none); it sets `closedCircuit`. */
  | { kind: 'send'; release(result: AttemptResult, error?: string): number; closedCircuit?: boolean }
  /** The circuit is open: postpone; `retryInMs` is when it lets a probe through. */
  | { kind: 'open'; failures: number; retryInMs: number; lastError?: string }
  /** At its bound and slow: set the delivery aside rather than hold a prefetch slot. */
  | { kind: 'defer' };

/** Answers kept by default. */
export const ANSWERS_KEPT = 20;

/**
 * An endpoint's last answers, newest in the lowest bit (1: failed), up to `size` (at most 30): most
 * of them failing, besides the threshold's failures in a row, tells a dead endpoint from a flaky one.
 */
interface RecentAnswers {
  bits: number;
  seen: number;
}

function noteAnswer(recent: RecentAnswers, failed: boolean, size: number): void {
  recent.bits = ((recent.bits << 1) | (failed ? 1 : 0)) & ((1 << size) - 1);
  recent.seen = Math.min(recent.seen + 1, size);
}

/** At least half of the answers held failed (of those seen, for an endpoint seen fewer times than `size`). */
function mostlyFailed(recent: RecentAnswers): boolean {
  let failed = 0;
  for (let bits = recent.bits; bits !== 0; bits &= bits - 1) failed++;
  return 2 * failed >= recent.seen;
}

interface EndpointState {
  started: number[];
  /** Failed in a row here. */
  failures: number;
  recent: RecentAnswers;
  /** As its row last said (CircuitRows): open while > 0, its probe due then. */
  openUntil: number;
  cooldownMs: number;
  /** Its row closed with no answer: the next delivery is as good as a probe. */
  unanswered: boolean;
  latencyMs: number | undefined;
  waiters: Waiter[];
  /** Its deliveries waiting in the process's line. */
  blocked: number;
  lastError?: string;
  /** slowIn()'s: when the oldest request was first seen past the threshold, and since when the loop polled (0: not). */
  suspectedAt: number;
  polledFrom: number;
}

/** One of a merchant's endpoints' share (by its id), across its URLs. */
interface MerchantState {
  started: number[];
  /** Deliveries whose endpoint has room while the share is at its bound. */
  waiters: Waiter[];
  /** The URL it sent to last (moved()). */
  endpoint: EndpointState | undefined;
}

/** A waiting delivery's wake-up, with its arrival number and, in the process's line, its endpoint. */
type Waiter = (() => void) & { readonly since: number; readonly endpoint?: EndpointState };

/** How long an endpoint's line waiting in memory may take to clear (lineLong()). */
const LINE_CLEARS_MS = 1_000;

/** An endpoint at its bound is slow past this, or four times its usual latency if longer. */
const SLOW_AFTER_MS = 100;

/**
 * Per-endpoint bulkhead and circuit breaker, so one merchant whose server hangs or fails cannot
 * take the dispatcher's connections and prefetch slots from the others. The circuit is its row in
 * PostgreSQL (libs/waits), the one copy that decides: failures here open it there, an answer
 * through it closes it there, and the row comes back by openCircuit() and closeCircuit() (CircuitRows).
 */
export class EndpointGuards {
  /** In order of last use, the least recent first. */
  private readonly endpoints = new Map<string, EndpointState>();
  /** Their keys by circuit (circuitOf), for closeCircuit(). */
  private readonly circuits = new Map<string, Set<string>>();
  /** The last used: most deliveries come in runs, so no lookup. */
  private latestEndpoint: string | undefined;
  private latestState: EndpointState | undefined;
  private readonly now: () => number;
  private readonly maxEndpoints: number;
  private readonly maxTotal: number;
  private readonly maxPerMerchant: number;
  private readonly merchants = new Map<string, MerchantState>();
  private latestMerchantId: string | undefined;
  private latestMerchant: MerchantState | undefined;
  private total = 0;
  /** Deliveries whose endpoint has room while the process has none, oldest first (by `since`). */
  private readonly blocked: Waiter[] = [];
  private arrivals = 0;

  constructor(private readonly options: EndpointGuardOptions) {
    // Monotonic: a step of the host's clock must neither set deliveries aside as busy nor hide a hung endpoint.
    this.now = options.now ?? (() => performance.now());
    this.maxEndpoints = options.maxEndpoints ?? 10_000;
    this.maxTotal = options.maxTotalInFlight ?? Infinity;
    this.maxPerMerchant = options.maxPerMerchant ?? Infinity;
  }

  merchantInFlight(merchantId: string): number {
    let total = 0;
    for (const [share, state] of this.merchants) if (share === merchantId || share.startsWith(endpointKey(merchantId, ''))) total += state.started.length;
    return total;
  }

  get inFlight(): number {
    return this.total;
  }

  /** Deliveries waiting because every request slot of the process is taken. */
  get waitingForRoom(): number {
    return this.blocked.length;
  }

  get size(): number {
    return this.endpoints.size;
  }

  /**
   * Send now, postpone (open circuit), defer (slow endpoint at its bound), or wait for a slot.
   * `force` sends through an open circuit (a resend); `probe` (the row's probe) too, past the
   * endpoint's bound, and its failure doubles the cooldown. Undefined when `stopped` turns true while waiting.
   */
  async acquire(
    endpoint: string,
    request: { merchantId: string; endpointId?: string; canDefer: boolean; deferralsSpent?: boolean; force: boolean; probe?: boolean; spanOver?: boolean },
    stopped: () => boolean,
  ): Promise<Admission | undefined> {
    const { canDefer } = request;
    const since = this.arrivals++;
    for (;;) {
      if (stopped()) return this.leave(this.endpoints.get(endpoint), this.merchants.get(shareOf(request.merchantId, request.endpointId)), undefined);
      // Looked up again after each wait: an idle endpoint may have been pruned meanwhile.
      const state = this.state(endpoint);
      const merchant = this.merchant(shareOf(request.merchantId, request.endpointId));
      if (merchant.endpoint !== state) this.moved(merchant, state);
      // Open: postponed until the row's probe, which comes from its scheduler.
      if (state.openUntil > 0 && !request.force && !request.probe) return this.leave(state, merchant, this.openAnswer(state));
      const probe = request.probe === true;
      if ((probe || state.started.length < this.options.maxInFlight) && merchant.started.length < this.maxPerMerchant) {
        if (this.total < this.maxTotal) return this.send(state, merchant, probe);
        // The process has no room: wait for any request to end, unless the endpoint's line is long.
        if (this.setAside(state, state.waiters.length + state.blocked, request)) return this.leave(state, merchant, { kind: 'defer' });
        state.blocked++;
        await new Promise<void>((resolve) => this.waitForRoom(Object.assign(resolve, { since, endpoint: state })));
        state.blocked--;
        continue;
      }
      // At the endpoint's bound, or its share's (requests on other URLs): slow is judged on those requests.
      const full = probe || state.started.length < this.options.maxInFlight ? undefined : state;
      const slowIn = full ? this.slowIn(full) : merchant.started[0]! + this.threshold(state) - this.now();
      if (slowIn <= 0 && canDefer) return this.leave(state, merchant, { kind: 'defer' });
      const waiters = full ? full.waiters : merchant.waiters;
      // Each waiting delivery holds a prefetch slot: at a long line one that may be set aside is,
      // and one whose span ran out (sent through an open circuit) fails as the circuit would have it.
      const waiting = full ? full.waiters.length + full.blocked : waiters.length;
      if (request.spanOver && state.openUntil > 0 && this.lineLong(full ?? state, waiting)) return this.leave(state, merchant, this.openAnswer(state));
      if (this.setAside(full ?? state, waiting, request)) return this.leave(state, merchant, { kind: 'defer' });
      // Wake on a free slot, or when the endpoint would count as slow, whichever comes first.
      await new Promise<void>((resolve) => {
        const timer = slowIn > 0 && canDefer ? setTimeout(wake, slowIn + 1) : undefined;
        wake.since = since;
        function wake() {
          clearTimeout(timer);
          const at = waiters.indexOf(wake);
          if (at >= 0) waiters.splice(at, 1);
          resolve();
        }
        waiters.push(wake as Waiter);
      });
    }
  }

  /** Leaving without a slot, it may be the one a freed slot woke: the first of each line with room is woken in its stead. */
  private leave<T extends Admission | undefined>(state: EndpointState | undefined, merchant: MerchantState | undefined, admission: T): T {
    if (state && state.started.length < this.options.maxInFlight) state.waiters[0]?.();
    if (merchant && merchant.started.length < this.maxPerMerchant) merchant.waiters[0]?.();
    if (this.total < this.maxTotal && this.blocked.length > 0) this.blocked.splice(this.nextBlocked(), 1)[0]!();
    return admission;
  }

  /** Long: half its share or more waiting, which its usual latency would not clear within LINE_CLEARS_MS. */
  private lineLong(state: EndpointState, waiting: number): boolean {
    const clearsInMs = ((waiting + 1) / this.options.maxInFlight) * (state.latencyMs ?? 0);
    return waiting >= Math.ceil(this.options.maxInFlight / 2) && clearsInMs > LINE_CLEARS_MS;
  }

  /** At a long line one that may be set aside is; its deferrals spent, at a line twice as long. */
  private setAside(state: EndpointState, waiting: number, request: { canDefer: boolean; deferralsSpent?: boolean }): boolean {
    if (!this.lineLong(state, waiting)) return false;
    return request.canDefer || (request.deferralsSpent === true && waiting >= 2 * Math.ceil(this.options.maxInFlight / 2));
  }

  /** In the process's line by age: one woken to find the process full keeps its place. */
  private waitForRoom(waiter: Waiter): void {
    let at = this.blocked.length;
    while (at > 0 && this.blocked[at - 1]!.since > waiter.since) at--;
    this.blocked.splice(at, 0, waiter);
  }

  /** Which of the process's line a free slot goes to: the oldest whose endpoint is not failing, else the oldest. */
  private nextBlocked(): number {
    const at = this.blocked.findIndex((waiter) => !waiter.endpoint || waiter.endpoint.failures === 0);
    return at < 0 ? 0 : at;
  }

  /** So a stopping dispatcher can hand them back. */
  wakeAll(): void {
    for (const state of this.endpoints.values()) for (const wake of [...state.waiters]) wake();
    for (const merchant of this.merchants.values()) for (const wake of [...merchant.waiters]) wake();
    for (const wake of this.blocked.splice(0)) wake();
  }

  /** As labels safe to show: origin and merchant, never the path. */
  openEndpoints(): string[] {
    return this.openKeys().map(endpointLabel);
  }

  openKeys(): string[] {
    return [...this.endpoints].filter(([, state]) => state.openUntil > 0).map(([endpoint]) => endpoint);
  }

  /** The endpoint's row is open: its next probe in `probeInMs`. Deliveries waiting for its slots are woken to be postponed. */
  openCircuit(endpoint: string, cooldownMs: number | undefined, probeInMs: number): void {
    const state = this.state(endpoint);
    const was = state.openUntil;
    state.openUntil = Math.max(1, this.now() + Math.max(0, probeInMs));
    state.cooldownMs = Math.min(Math.max(cooldownMs ?? this.options.cooldownMs, this.options.cooldownMs), this.options.maxCooldownMs);
    if (was === 0) for (const wake of [...state.waiters]) wake();
  }

  /**
   * The endpoint's row closed, for all its URLs. `answered`: its failures and cooldown start over.
   * Else one failure opens it again, as a failed probe would.
   */
  closeCircuit(endpoint: string, answered: boolean): void {
    for (const key of this.circuits.get(circuitOf(endpoint)) ?? []) {
      const state = this.endpoints.get(key)!;
      state.openUntil = 0;
      state.unanswered = !answered;
      if (answered) {
        state.failures = 0;
        state.cooldownMs = this.options.cooldownMs;
      } else state.failures = Math.max(state.failures, this.options.failureThreshold - 1);
    }
  }

  /** The row's probe time while the endpoint's circuit is open, on this guard's clock (performance.now() unless given); 0 when closed. */
  openUntil(endpoint: string): number {
    return this.endpoints.get(endpoint)?.openUntil ?? 0;
  }

  private openAnswer(state: EndpointState): Admission {
    return { kind: 'open', failures: state.failures, retryInMs: Math.max(0, state.openUntil - this.now()), lastError: state.lastError };
  }

  /**
   * How long until the endpoint counts as slow (≤ 0: it does): its oldest request past the
   * threshold, and still unanswered after the threshold again with the event loop free to read the
   * answer, so the process's own stalls do not count against a fast endpoint.
   */
  private slowIn(state: EndpointState): number {
    const now = this.now();
    const left = state.started[0]! + this.threshold(state) - now;
    if (left > 0) {
      state.suspectedAt = 0;
      return left;
    }
    if (state.suspectedAt === 0) {
      const at = (state.suspectedAt = now);
      state.polledFrom = 0;
      // Runs once the current burst of callbacks is over: from then on the loop polls for answers.
      setImmediate(() => {
        if (state.suspectedAt === at) state.polledFrom = this.now();
      });
    }
    return state.polledFrom === 0 ? 1 : state.polledFrom + this.threshold(state) - now;
  }

  private threshold(state: EndpointState): number {
    return Math.max(SLOW_AFTER_MS, 4 * (state.latencyMs ?? 0));
  }

  /** The share sends to another URL than last time: the new one takes its circuit when that is the more open. */
  private moved(merchant: MerchantState, state: EndpointState): void {
    const previous = merchant.endpoint;
    merchant.endpoint = state;
    if (!previous || previous.openUntil <= state.openUntil) return;
    state.failures = Math.max(state.failures, previous.failures);
    state.recent = { ...previous.recent };
    state.openUntil = previous.openUntil;
    state.cooldownMs = previous.cooldownMs;
    state.lastError = previous.lastError;
  }

  private merchant(merchantId: string): MerchantState {
    if (this.latestMerchantId === merchantId) return this.latestMerchant!;
    let merchant = this.merchants.get(merchantId);
    if (!merchant) {
      if (this.merchants.size >= this.maxEndpoints) {
        pruneIdle(
          this.merchants,
          this.maxEndpoints,
          (merchant) => merchant.started.length === 0 && merchant.waiters.length === 0 && (!merchant.endpoint || merchant.endpoint.openUntil === 0),
          (merchantId) => {
            if (this.latestMerchantId === merchantId) this.latestMerchantId = this.latestMerchant = undefined;
          },
        );
      }
      this.merchants.set(merchantId, (merchant = { started: [], waiters: [], endpoint: undefined }));
    }
    this.latestMerchantId = merchantId;
    this.latestMerchant = merchant;
    return merchant;
  }

  private send(state: EndpointState, merchant: MerchantState, probe: boolean): Admission {
    const start = this.now();
    state.started.push(start);
    merchant.started.push(start);
    this.total++;
    let released = false;
    const slot: Extract<Admission, { kind: 'send' }> = {
      kind: 'send',
      release: (result, error) => {
        if (released) return 0;
        released = true;
        state.started.splice(state.started.indexOf(start), 1);
        merchant.started.splice(merchant.started.indexOf(start), 1);
        this.total--;
        const took = this.now() - start;
        if (result !== 'unused') state.latencyMs = state.latencyMs === undefined ? took : 0.8 * state.latencyMs + 0.2 * took;
        // Its oldest request now answered in time: a later suspicion starts over.
        if (state.suspectedAt !== 0 && (state.started.length === 0 || state.started[0]! + this.threshold(state) > this.now())) state.suspectedAt = 0;
        // What it opens or closes is written to the row, which tells every dispatcher (this one too).
        let opens = 0;
        if (result !== 'unused') noteAnswer(state.recent, result === 'failed', this.options.failureWindow ?? ANSWERS_KEPT);
        if (result === 'succeeded' || result === 'rejected') {
          if (state.openUntil > 0) slot.closedCircuit = true;
          state.failures = 0;
          state.unanswered = false;
        } else if (result === 'failed') {
          state.failures++;
          state.lastError = error;
          if (probe || (state.unanswered && state.openUntil === 0)) opens = Math.min(state.cooldownMs * 2, this.options.maxCooldownMs);
          else if (state.failures >= this.options.failureThreshold && state.openUntil === 0 && mostlyFailed(state.recent)) opens = state.cooldownMs;
        }
        // The free slot goes to the longest waiting of this endpoint's and the process's lines' firsts.
        const merchantWaiter = merchant.waiters[0];
        const endpointWaiter = state.waiters[0];
        const own = endpointWaiter ?? merchantWaiter;
        const next = this.nextBlocked();
        const first = this.blocked[next];
        if (first && (!own || first.since < own.since)) this.blocked.splice(next, 1)[0]!();
        merchantWaiter?.();
        endpointWaiter?.();
        return opens;
      },
    };
    return slot;
  }

  private state(endpoint: string): EndpointState {
    if (this.latestEndpoint === endpoint) return this.latestState!;
    let state = this.endpoints.get(endpoint);
    if (state) {
      this.endpoints.delete(endpoint);
      this.endpoints.set(endpoint, state);
    } else {
      if (this.endpoints.size >= this.maxEndpoints) {
        pruneIdle(
          this.endpoints,
          this.maxEndpoints,
          (state) => state.started.length === 0 && state.waiters.length === 0 && state.blocked === 0 && state.openUntil === 0,
          (endpoint) => {
            const circuit = circuitOf(endpoint);
            const keys = this.circuits.get(circuit)!;
            if (keys.delete(endpoint) && keys.size === 0) this.circuits.delete(circuit);
            if (this.latestEndpoint === endpoint) this.latestEndpoint = this.latestState = undefined;
          },
        );
      }
      state = { started: [], failures: 0, recent: { bits: 0, seen: 0 }, openUntil: 0, cooldownMs: this.options.cooldownMs, unanswered: false, latencyMs: undefined, waiters: [], blocked: 0, suspectedAt: 0, polledFrom: 0 };
      this.endpoints.set(endpoint, state);
      const circuit = circuitOf(endpoint);
      this.circuits.set(circuit, (this.circuits.get(circuit) ?? new Set()).add(endpoint));
    }
    this.latestEndpoint = endpoint;
    this.latestState = state;
    return state;
  }
}

/**
 * Deletes idle entries whose circuit is closed, least recently used first, down to 90% of `bound`
 * (so pruning runs once a tenth of it). An open one is kept: forgotten, it sent to an endpoint its
 * row held shut (nothing announces the row again until it closes).
 */
function pruneIdle<T>(map: Map<string, T>, bound: number, idle: (value: T) => boolean, forgotten: (key: string) => void): void {
  const target = Math.floor(bound * 0.9);
  for (const [key, value] of map) {
    if (map.size <= target) return;
    if (idle(value)) {
      map.delete(key);
      forgotten(key);
    }
  }
}

/** A merchant without endpoint ids has one share. */
function shareOf(merchantId: string, endpointId: string | undefined): string {
  return endpointId === undefined ? merchantId : endpointKey(merchantId, endpointId);
}
