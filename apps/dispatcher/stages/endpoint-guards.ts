import { endpointKey, isKeyOf } from './endpoint-key.js';
import { pruneIdle } from './prune-idle.js';

export interface EndpointGuardOptions {
  /** Requests in flight to one endpoint at most. */
  maxInFlight: number;
  /**
   * Requests in flight to all endpoints together at most (DISPATCH_CONCURRENCY); unbounded when
   * absent. The dispatcher holds more deliveries than this (its prefetch), so that those whose
   * record and ack are still going out do not keep the next ones from being sent.
   */
  maxTotalInFlight?: number;
  /**
   * Requests in flight for one of a merchant's endpoints (by its id) at most, whatever its URLs
   * (unbounded when absent): the per-URL bound alone lets an endpoint whose URL changes take one
   * share per URL. Keyed by the endpoint's id, not the merchant: one slow endpoint of a merchant
   * does not take its other endpoints' share.
   */
  maxPerMerchant?: number;
  /** Consecutive failed attempts that open the circuit. */
  failureThreshold: number;
  /** How long an open circuit stays open before one probe is let through; doubles while probes fail. */
  cooldownMs: number;
  maxCooldownMs: number;
  /**
   * An endpoint at its bound is slow when its oldest request has run longer than this, or four
   * times its usual latency if that is longer, and is still unanswered that long again once this
   * process's event loop was free to read it (slowIn()). Deliveries for a slow endpoint are set aside
   * instead of waiting for a slot; for a fast one they wait, since a slot frees in moments.
   */
  slowAfterMs?: number;
  /**
   * Endpoints remembered at most, besides those with deliveries in flight or waiting: past it the
   * least recently used idle ones are forgotten, closed circuits before open ones. A forgotten
   * endpoint starts again closed, which for an idle closed one is what it was anyway.
   */
  maxEndpoints?: number;
  now?: () => number;
}

/**
 * How an attempt ended for the breaker. `rejected` is a 4xx other than 408 and 429: the endpoint
 * is up and answering quickly, only refusing this webhook (wrong path, bad verification), so for
 * the circuit it counts as reachable, like a success: the breaker guards against endpoints that
 * are down or slow, and postponing would only delay the failure the merchant must see and fix.
 * `unused`: the slot given back unsent (its endpoint turned off while it waited): breaker and latency untouched.
 */
export type AttemptResult = 'succeeded' | 'failed' | 'rejected' | 'unused';

export type Admission =
  /** `release` returns how long the endpoint's circuit stays open after this attempt (0: closed). */
  | { kind: 'send'; release(result: AttemptResult, error?: string): number }
  /** The circuit is open: postpone; `retryInMs` is when it lets a probe through. */
  | { kind: 'open'; failures: number; retryInMs: number; lastError?: string }
  /** At its bound and slow: set the delivery aside rather than hold a prefetch slot. */
  | { kind: 'defer' };

interface EndpointState {
  /** Start times of the requests in flight, oldest first (appended as they start, removed as they end). */
  started: number[];
  failures: number;
  openUntil: number;
  cooldownMs: number;
  probing: boolean;
  latencyMs: number | undefined;
  waiters: Waiter[];
  /** Its deliveries waiting in the process's line (it has room, the process has none): its line too, for setAside(). */
  blocked: number;
  lastError?: string;
  /**
   * When this process first saw the oldest request past the slow threshold (0: not), and from when
   * its event loop has been free to read the answer since (0: not yet): see slowIn().
   */
  suspectedAt: number;
  polledFrom: number;
  /** Merchants seen on this endpoint, for the metric label (the URL's path can hold a token). */
  merchants: Set<string>;
}

/** One of a merchant's endpoints' share (by its id), across its URLs: a URL change neither adds a share nor closes a circuit. */
interface MerchantState {
  /** Start times of the merchant's requests in flight, to any of its endpoints, oldest first. */
  started: number[];
  /** Deliveries whose endpoint has room while the merchant is at its bound, first come first. */
  waiters: Waiter[];
  /** The endpoint the merchant sent to last: a new one starts with its circuit. */
  endpoint: EndpointState | undefined;
}

/** A waiting delivery's wake-up, with when it came to admission (an order: see EndpointGuards.arrivals). */
type Waiter = (() => void) & { readonly since: number };

/** How long an endpoint's line of deliveries waiting in memory for its slots may take to clear, past its share (see acquire()). */
export const LINE_CLEARS_MS = 1_000;

/**
 * Per-endpoint bulkhead and circuit breaker, so one merchant whose server hangs or fails cannot
 * take the dispatcher's connections and prefetch slots from the others.
 */
export class EndpointGuards {
  /** In order of last use, the least recent first (a Map keeps insertion order; a use re-inserts). */
  private readonly endpoints = new Map<string, EndpointState>();
  /** The endpoint used last, already at the end of that order: its next use needs no re-insert. */
  private latestEndpoint: string | undefined;
  private latestState: EndpointState | undefined;
  private readonly now: () => number;
  private readonly slowAfterMs: number;
  private readonly maxEndpoints: number;
  private readonly maxTotal: number;
  private readonly maxPerMerchant: number;
  private readonly merchants = new Map<string, MerchantState>();
  /** The merchant admitted last: most deliveries come in runs of one merchant, so no lookup for those. */
  private latestMerchantId: string | undefined;
  private latestMerchant: MerchantState | undefined;
  /** Requests in flight to all endpoints. */
  private total = 0;
  /** Deliveries whose endpoint has room while every request slot of the process is taken, oldest first (by `since`). */
  private readonly blocked: Waiter[] = [];
  /** Deliveries come to acquire(): each waiter's `since`, kept across its waits, so the oldest goes first. */
  private arrivals = 0;

  constructor(private readonly options: EndpointGuardOptions) {
    this.now = options.now ?? Date.now;
    this.slowAfterMs = options.slowAfterMs ?? 100;
    this.maxEndpoints = options.maxEndpoints ?? 10_000;
    this.maxTotal = options.maxTotalInFlight ?? Infinity;
    this.maxPerMerchant = options.maxPerMerchant ?? Infinity;
  }

  /** Requests in flight for one merchant's endpoint now (by its id), to all its URLs; without an id, for all its endpoints. */
  merchantInFlight(merchantId: string, endpointId?: string): number {
    if (endpointId !== undefined) return this.merchants.get(shareOf(merchantId, endpointId))?.started.length ?? 0;
    // The merchant's endpoints together (a metric, a test): each share of the merchant's.
    let total = 0;
    for (const [share, state] of this.merchants) if (share === merchantId || isKeyOf(share, merchantId)) total += state.started.length;
    return total;
  }

  /** Requests in flight to all endpoints now. */
  get inFlight(): number {
    return this.total;
  }

  /** Deliveries waiting because every request slot of the process is taken (not for their endpoint). */
  get waitingForRoom(): number {
    return this.blocked.length;
  }

  /** Endpoints remembered now. */
  get size(): number {
    return this.endpoints.size;
  }

  /**
   * Admits a delivery: send now, postpone (open circuit), defer (slow endpoint at its bound and
   * deferring allowed), or wait for a slot. `force` sends through an open circuit (a resend: the
   * merchant says it is fixed). Undefined when `stopped` turns true (stopping, its channel gone) while waiting.
   */
  async acquire(
    endpoint: string,
    request: { merchantId: string; endpointId?: string; canDefer: boolean; deferralsSpent?: boolean; force: boolean; spanOver?: boolean },
    stopped: () => boolean,
  ): Promise<Admission | undefined> {
    const { canDefer } = request;
    const since = this.arrivals++;
    for (;;) {
      if (stopped()) return this.leave(this.endpoints.get(endpoint), this.merchants.get(shareOf(request.merchantId, request.endpointId)), undefined);
      // Looked up again after each wait: an idle endpoint may have been pruned meanwhile.
      const state = this.state(endpoint);
      if (state.merchants.size < 20) state.merchants.add(request.merchantId);
      const merchant = this.merchant(shareOf(request.merchantId, request.endpointId));
      if (merchant.endpoint !== state) this.moved(merchant, state);
      const open = state.openUntil > 0 && !request.force;
      if (open && (this.now() < state.openUntil || state.probing)) {
        const retryInMs = state.probing ? state.cooldownMs : state.openUntil - this.now();
        return this.leave(state, merchant, { kind: 'open', failures: state.failures, retryInMs, lastError: state.lastError });
      }
      if ((open || state.started.length < this.options.maxInFlight) && merchant.started.length < this.maxPerMerchant) {
        if (this.total < this.maxTotal) {
          if (open) state.probing = true; // half-open: this one delivery probes the endpoint
          return this.send(state, merchant, open);
        }
        // The endpoint has room but the process has none: wait for any request to end. Set aside
        // only if its endpoint's line (there and here) is long: a freed slot goes to the oldest
        // waiting, so a busy endpoint's deliveries often wait here, and unbounded they filled the prefetch.
        if (this.setAside(state, state.waiters.length + state.blocked, request)) return this.leave(state, merchant, { kind: 'defer' });
        state.blocked++;
        await new Promise<void>((resolve) => this.waitForRoom(Object.assign(resolve, { since })));
        state.blocked--;
        continue;
      }
      // At the endpoint's bound, or the merchant's (its requests in flight to its other URLs,
      // usually the one it left): slow is judged on those requests, the oldest first.
      const full = open || state.started.length < this.options.maxInFlight ? undefined : state;
      const slowIn = full ? this.slowIn(full) : this.merchantSlowIn(merchant, state);
      if (slowIn <= 0 && canDefer) return this.leave(state, merchant, { kind: 'defer' });
      const waiters = full ? full.waiters : merchant.waiters;
      // Each waiting delivery holds a prefetch slot: an endpoint that answers in time but slowly (never
      // "slow" against its own latency) once held them all, and every other merchant waited behind it.
      // At a long line (lineLong()) one that may be set aside is (a wait row), and one sent through an
      // open circuit because its span ran out fails as the circuit would have it (set aside, it would
      // only come back to this line): a dead endpoint's postponed webhooks come due at the rate they
      // arrived, each waiting for its timeout. The circuit is asked again: it may have closed meanwhile.
      const waiting = full ? full.waiters.length + full.blocked : waiters.length;
      if (request.spanOver && this.refuses(state) && this.lineLong(full ?? state, waiting)) return this.leave(state, merchant, { kind: 'open', failures: state.failures, retryInMs: Math.max(0, state.openUntil - this.now()), lastError: state.lastError });
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

  /**
   * Leaving without a slot, it may be the one a freed slot woke (release() wakes one per line): the
   * first of each line with room is woken in its stead, to take it or wait again. Else one waiting
   * for the process slept beside a free slot until an unrelated request ended, and the merchant's
   * line (its requests on a URL it left), with no deferral left hence no timer, slept for ever.
   */
  private leave<T extends Admission | undefined>(state: EndpointState | undefined, merchant: MerchantState | undefined, admission: T): T {
    if (state && state.started.length < this.options.maxInFlight) state.waiters[0]?.();
    if (merchant && merchant.started.length < this.maxPerMerchant) merchant.waiters[0]?.();
    if (this.total < this.maxTotal) this.blocked.shift()?.();
    return admission;
  }

  /**
   * Long: half its share or more waiting (in its line and the process's), which its usual latency
   * would not clear within LINE_CLEARS_MS (a fast endpoint's full prefetch does). Half: waiting as
   * many as they may have in flight, two endpoints (each half the slots) held the whole prefetch
   * (twice the slots), and other merchants' deliveries stayed in the queue behind their backlog.
   */
  private lineLong(state: EndpointState, waiting: number): boolean {
    const clearsInMs = ((waiting + 1) / this.options.maxInFlight) * (state.latencyMs ?? 0);
    return waiting >= Math.ceil(this.options.maxInFlight / 2) && clearsInMs > LINE_CLEARS_MS;
  }

  /**
   * At a long line one that may be set aside is. Its deferrals spent (MAX_DEFERRALS), it may wait
   * in a line twice as long, which new ones do not reach, then is set aside all the same: waiting
   * however long, an overrun endpoint's webhooks held every prefetch slot for minutes.
   */
  private setAside(state: EndpointState, waiting: number, request: { canDefer: boolean; deferralsSpent?: boolean }): boolean {
    if (!this.lineLong(state, waiting)) return false;
    return request.canDefer || (request.deferralsSpent === true && waiting >= 2 * Math.ceil(this.options.maxInFlight / 2));
  }

  /** In the process's line by age: one woken from its endpoint's line to find the process full keeps its place. */
  private waitForRoom(waiter: Waiter): void {
    let at = this.blocked.length;
    while (at > 0 && this.blocked[at - 1]!.since > waiter.since) at--;
    this.blocked.splice(at, 0, waiter);
  }

  /** Wakes every delivery waiting for a slot, so a stopping dispatcher can hand them back. */
  wakeAll(): void {
    for (const state of this.endpoints.values()) for (const wake of [...state.waiters]) wake();
    for (const merchant of this.merchants.values()) for (const wake of [...merchant.waiters]) wake();
    for (const wake of this.blocked.splice(0)) wake();
  }

  /** Endpoints whose circuit is open now, as labels safe to show: origin and merchants, never the path. */
  openEndpoints(): string[] {
    return [...this.endpoints].filter(([, state]) => state.openUntil > 0).map(([endpoint, state]) => endpointLabel(endpoint, state.merchants));
  }

  /** When the endpoint's open circuit lets a probe through; 0 when closed. */
  openUntil(endpoint: string): number {
    return this.endpoints.get(endpoint)?.openUntil ?? 0;
  }

  /** True while the endpoint's circuit turns every delivery away (open, its probe not yet due or out): acquire() answers 'open' unless forced. */
  refusing(endpoint: string): boolean {
    const state = this.endpoints.get(endpoint);
    return state !== undefined && this.refuses(state);
  }

  private refuses(state: EndpointState): boolean {
    return state.openUntil > 0 && (this.now() < state.openUntil || state.probing);
  }

  /**
   * How long until the endpoint counts as slow (≤ 0: it does): its oldest request past the
   * threshold, and still unanswered after the threshold again with this process's event loop free
   * to read the answer. Its age alone would count the process's own stalls against the endpoint:
   * the first burst of a fresh dispatcher's prefetch (every request started, none read yet) or a
   * loaded machine that did not run the process for 100 ms set aside ~190 webhooks of a fast
   * receiver in a bench run (BENCHMARKS.md 17).
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
    return Math.max(this.slowAfterMs, 4 * (state.latencyMs ?? 0));
  }

  /**
   * The merchant is at its bound while this endpoint has room (its requests are on URLs it left,
   * or spread over several): slow by its oldest request, against this endpoint's usual latency.
   */
  private merchantSlowIn(merchant: MerchantState, state: EndpointState): number {
    const threshold = Math.max(this.slowAfterMs, 4 * (state.latencyMs ?? 0));
    return merchant.started[0]! + threshold - this.now();
  }

  /**
   * The merchant sends to another endpoint than last time (it changed its URL): the new one takes
   * the merchant's circuit when that is the more open, so a URL change does not close a circuit.
   */
  private moved(merchant: MerchantState, state: EndpointState): void {
    const previous = merchant.endpoint;
    merchant.endpoint = state;
    if (!previous || previous.openUntil <= state.openUntil) return;
    // Only an endpoint of this merchant's own: one another merchant uses keeps its circuit, or a
    // merchant could open another's circuit by pointing its URL there.
    if (state.merchants.size !== 1) return;
    state.failures = Math.max(state.failures, previous.failures);
    state.openUntil = previous.openUntil;
    state.cooldownMs = previous.cooldownMs;
    state.lastError = previous.lastError;
  }

  private merchant(merchantId: string): MerchantState {
    if (this.latestMerchantId === merchantId) return this.latestMerchant!;
    let merchant = this.merchants.get(merchantId);
    if (!merchant) {
      if (this.merchants.size >= this.maxEndpoints) this.pruneMerchants();
      merchant = { started: [], waiters: [], endpoint: undefined };
      this.merchants.set(merchantId, merchant);
    }
    this.latestMerchantId = merchantId;
    this.latestMerchant = merchant;
    return merchant;
  }

  /** Forgets idle merchants down to 90% of the bound, those whose last circuit is closed first. */
  private pruneMerchants(): void {
    pruneIdle(
      this.merchants,
      this.maxEndpoints,
      (merchant) => merchant.started.length === 0 && merchant.waiters.length === 0,
      (merchant) => !merchant.endpoint || merchant.endpoint.openUntil === 0,
      (merchantId) => {
        if (this.latestMerchantId === merchantId) this.latestMerchantId = this.latestMerchant = undefined;
      },
    );
  }

  private send(state: EndpointState, merchant: MerchantState, probe: boolean): Admission {
    const start = this.now();
    state.started.push(start);
    merchant.started.push(start);
    this.total++;
    let released = false;
    return {
      kind: 'send',
      release: (result, error) => {
        if (released) return 0;
        released = true;
        // Whether this end opens the circuit (a failure only: a success path asks nothing more).
        const refused = result === 'failed' && this.refuses(state);
        state.started.splice(state.started.indexOf(start), 1);
        merchant.started.splice(merchant.started.indexOf(start), 1);
        this.total--;
        const took = this.now() - start;
        if (result !== 'unused') state.latencyMs = state.latencyMs === undefined ? took : 0.8 * state.latencyMs + 0.2 * took;
        if (probe) state.probing = false;
        // Its oldest request now answered in time: a later suspicion starts over (slowIn()).
        if (state.suspectedAt !== 0 && (state.started.length === 0 || state.started[0]! + this.threshold(state) > this.now())) state.suspectedAt = 0;
        if (result === 'succeeded' || result === 'rejected') {
          state.failures = 0;
          state.openUntil = 0;
          state.cooldownMs = this.options.cooldownMs;
        } else if (result === 'failed') {
          state.failures++;
          state.lastError = error;
          if (probe) {
            state.cooldownMs = Math.min(state.cooldownMs * 2, this.options.maxCooldownMs);
            state.openUntil = this.now() + state.cooldownMs;
          } else if (state.failures >= this.options.failureThreshold && state.openUntil === 0) {
            state.openUntil = this.now() + state.cooldownMs;
          }
        }
        // One slot is free: it goes to the delivery waiting longest, this endpoint's next or the
        // first in the process's line. Given to the endpoint's own line first, two endpoints with
        // endless demand (each half the slots) kept them all, and other merchants waited while it
        // lasted. Woken first, the oldest takes it; the others woken (and the merchant's waiter, on
        // another of its URLs) wait again, by their age. When this end opened the circuit, the whole
        // line is woken, to be postponed: woken one per request that ends, those with no deferral
        // left each held a prefetch slot until a probe's end, minutes apart while probes fail.
        const merchantWaiter = merchant.waiters[0];
        const endpointWaiter = state.waiters[0];
        const own = endpointWaiter ?? merchantWaiter;
        const first = this.blocked[0];
        if (first && (!own || first.since < own.since)) this.blocked.shift()!();
        merchantWaiter?.();
        if (endpointWaiter) {
          if (result === 'failed' && !refused && this.refuses(state)) for (const wake of [...state.waiters]) wake();
          else endpointWaiter();
        }
        return state.openUntil > 0 ? Math.max(1, state.openUntil - this.now()) : 0;
      },
    };
  }

  private state(endpoint: string): EndpointState {
    if (this.latestEndpoint === endpoint) return this.latestState!;
    let state = this.endpoints.get(endpoint);
    if (state) {
      this.endpoints.delete(endpoint);
      this.endpoints.set(endpoint, state);
    } else {
      if (this.endpoints.size >= this.maxEndpoints) this.prune();
      state = {
        started: [],
        failures: 0,
        openUntil: 0,
        cooldownMs: this.options.cooldownMs,
        probing: false,
        latencyMs: undefined,
        waiters: [],
        blocked: 0,
        suspectedAt: 0,
        polledFrom: 0,
        merchants: new Set(),
      };
      this.endpoints.set(endpoint, state);
    }
    this.latestEndpoint = endpoint;
    this.latestState = state;
    return state;
  }

  /**
   * Forgets the least recently used idle endpoints down to 90% of the bound (so that pruning runs
   * once per tenth of the bound, not on every new URL): closed circuits first, then open ones if
   * the closed were not enough. Busy endpoints (in flight, waiting, probing) are never forgotten.
   */
  private prune(): void {
    pruneIdle(
      this.endpoints,
      this.maxEndpoints,
      (state) => state.started.length === 0 && state.waiters.length === 0 && state.blocked === 0 && !state.probing,
      (state) => state.openUntil === 0,
      (endpoint) => {
        if (this.latestEndpoint === endpoint) this.latestEndpoint = this.latestState = undefined;
      },
    );
  }
}

/** The key of a share: the merchant's endpoint by its id (a merchant without ids has one share). */
function shareOf(merchantId: string, endpointId: string | undefined): string {
  return endpointId === undefined ? merchantId : endpointKey(merchantId, endpointId);
}

/**
 * An endpoint is the merchant's webhook URL, not its server: platforms host many merchants' hooks
 * on one origin, and one sub-merchant's broken path must not open the circuit for the others.
 */
export function endpointOf(url: string): string {
  try {
    return new URL(url).href;
  } catch {
    return url;
  }
}

function endpointLabel(endpoint: string, merchants: Set<string>): string {
  let origin = endpoint;
  try {
    origin = new URL(endpoint).origin;
  } catch {
    // keep as is
  }
  return `${origin} (${[...merchants].sort().join(',')})`;
}
