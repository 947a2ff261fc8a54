import type { Queryable } from '../../../libs/delivery-store/index.js';
import type { Logger } from '../../../libs/logger/index.js';
import { type EndpointRate, endpointRateOf, endpointRates, lowerEndpointRate, type Endpoint, raiseEndpointRate } from '../../../libs/merchants/index.js';
import { sweepCells, takeCell } from '../../../libs/rate-limit/index.js';
import { BoundedMap, throttledWarning } from '../../../libs/runtime/index.js';
import { respaceThrottled, throttleQueueCell } from '../../../libs/waits/index.js';
import { endpointKey, endpointOfKey } from './endpoint-key.js';

/** How far ahead a slot may be granted (and its delivery held in memory): this many slots, within these bounds. */
export const THROTTLE_AHEAD = { slots: 10, minMs: 500, maxMs: 1_000 };

/** A dispatcher's takes of one endpoint's slots in flight at once for new deliveries (see Throttle.taking). */
export const TAKES_IN_FLIGHT = 2;

const RATE_READ_EVERY_MS = 1_000;

/** How late a slot's send may be: later, it would bunch with the next slots, and the slot is asked for again. */
const lateAfterMs = (intervalMs: number): number => Math.min(50, 2 * intervalMs);
/**
 * How far before its slot a send may go: 50 ms keeps any second's sends within the rate's 10 % burst.
 * A take's answer places the slot between the take's start plus its `inMs` and the answer's arrival
 * less the statement's time plus it: the ways there (a wait for a pooled connection) and back (a busy
 * event loop) are not told apart, so a send goes no earlier than this before the latest place. Giving
 * the slot up instead, when unsure by more than twice this, slowed a loaded host's sends below the rate.
 */
const SLOT_SLACK_MS = 50;

/**
 * How often a dispatcher adopts the lowered endpoints' rows it holds nothing of: else, once every
 * dispatcher its 429s reached restarted, nothing raised an endpoint's row.
 */
export const RATES_ADOPTED_EVERY_MS = 60_000;

/** How long the metric shows the rate an endpoint was last sent at. */
const RATE_SHOWN_MS = 60_000;

/** Endpoints each of the throttle's maps remembers: past it the one set longest ago is forgotten. */
export const REMEMBERED_ENDPOINTS = 10_000;

/**
 * `dueAt`: the wait's due time on the throttle's clock. `late`, on a go at a slot of the endpoint's
 * rate: whether sent now (after a wait for a request slot) it would go beside the next slots.
 */
export type ThrottleVerdict = { kind: 'go'; late?: () => boolean } | { kind: 'wait'; delayMs: number; dueAt: number } | { kind: 'stopping' };

interface Adaptive {
  rate: EndpointRate | undefined;
  readAt: number;
  reading?: Promise<void>;
  raisedAt: number;
}

/**
 * An endpoint with `maxPerSecond`, or one its 429/503 answers slowed, is sent one webhook per slot
 * of its rate, from a GCRA row in PostgreSQL shared by every dispatcher. A slot up to `aheadMs`
 * ahead is held in memory (slots closer than the scheduler's poll are all used); later, a
 * 'throttled' wait due a little before its place in the endpoint's queue (a second GCRA row).
 */
export class Throttle {
  private readonly adaptive = new BoundedMap<string, Adaptive>(REMEMBERED_ENDPOINTS);
  /** Sends per endpoint in the current second: what a first 429 halves on an endpoint without a limit. */
  private readonly sent = new BoundedMap<string, { second: number; count: number; last: number }>(REMEMBERED_ENDPOINTS);
  /** While PostgreSQL does not answer: each endpoint's next slot in this dispatcher alone. */
  private readonly alone = new BoundedMap<string, number>(REMEMBERED_ENDPOINTS);
  /** After a take paced alone: until when this dispatcher holds slots PostgreSQL knows nothing of. */
  private readonly pacedAlone = new BoundedMap<string, number>(REMEMBERED_ENDPOINTS);
  /** Each limited endpoint's rate as last admitted, and when. */
  private readonly current = new BoundedMap<string, { rate: number; at: number }>(REMEMBERED_ENDPOINTS);
  /** Until when a take is known to be refused: meanwhile a delivery goes straight to its place in the queue. */
  private readonly refusedUntil = new BoundedMap<string, number>(REMEMBERED_ENDPOINTS);
  /** Until when the endpoint's queue is ahead of its slots: a new delivery goes to its back without a take. */
  private readonly queuedUntil = new BoundedMap<string, number>(REMEMBERED_ENDPOINTS);
  /** New deliveries' takes in flight per endpoint, and those waiting: the row serializes them anyway. */
  private readonly taking = new Map<string, { inFlight: number; turns: Array<() => void> }>();
  /** Deliveries waiting for their place in each endpoint's queue: taken together, one statement a batch. */
  private readonly placing = new Map<string, Array<{ notBeforeMs: number; resolve: (placeAt: number | undefined) => void }>>();
  /** Per endpoint, while its queue is being stretched: the rate the next stretch goes to. */
  private readonly stretching = new Map<string, { to: number }>();
  private readonly now: () => number;
  private takes = 0;
  private adoptedAt = -Infinity;
  private readonly problem = throttledWarning((message, fields) => this.logger.warn(message, fields));
  readonly stats = { held: 0 };

  constructor(
    /** The slots' and the queue's cells, and the queue's throttled waits (respaced when its rate changes). */
    private readonly db: Queryable,
    private readonly logger: Logger,
    options: { now?: () => number } = {},
  ) {
    this.now = options.now ?? (() => performance.now());
  }

  /** The rate the merchant's endpoint is sent at now, per second (Infinity: no limit), as this dispatcher knows it. */
  rateOf(merchantId: string, webhook: Endpoint): number {
    const adaptive = this.adaptive.get(endpointKey(merchantId, webhook.id))?.rate?.rate ?? Infinity;
    return Math.min(webhook.maxPerSecond ?? Infinity, adaptive);
  }

  /** The metric's series: per merchant, the slowest rate this dispatcher sent one of its limited endpoints at lately. */
  rates(): ReadonlyMap<string, number> {
    const byMerchant = new Map<string, number>();
    for (const [key, { rate, at }] of this.current) {
      if (this.now() - at > RATE_SHOWN_MS) continue;
      const { merchantId } = endpointOfKey(key);
      byMerchant.set(merchantId, Math.min(rate, byMerchant.get(merchantId) ?? Infinity));
    }
    return byMerchant;
  }

  /** `handBack`: the delivery is a wait handed back in its turn (it takes its slot); otherwise a new one, which queues behind the waits. */
  async admit(merchantId: string, webhook: Endpoint, stopped: () => boolean, handBack = false): Promise<ThrottleVerdict> {
    const key = endpointKey(merchantId, webhook.id);
    if (webhook.maxPerSecond === undefined && !this.adaptive.has(key)) {
      this.adoptRates();
      return this.sending(key);
    }
    await this.readAdaptive(key, webhook.maxPerSecond !== undefined);
    const rate = this.rateOf(merchantId, webhook);
    if (rate === Infinity) {
      this.current.delete(key);
      return this.sending(key);
    }
    this.current.set(key, { rate, at: this.now() });
    const intervalMs = 1000 / rate;
    const aheadMs = Math.min(THROTTLE_AHEAD.maxMs, Math.max(THROTTLE_AHEAD.minMs, THROTTLE_AHEAD.slots * intervalMs));
    // A hold that ends late loses its slot: taken again, a few times, then it waits as a row.
    for (let tries = 0; tries < 3; tries++) {
      /** The slot conforms `inMs` after `from`, the take's start, give or take SLOT_SLACK_MS. */
      let granted: { inMs: number; from: number } | undefined;
      const release = handBack ? undefined : await this.turn(key);
      try {
        const refusedFor = (this.refusedUntil.get(key) ?? 0) - this.now();
        if (refusedFor > 0) return this.queue(key, intervalMs, aheadMs, refusedFor);
        // A queue forming (places being taken) or ahead of the slots: a new delivery joins its back.
        if (!handBack && (this.placing.has(key) || (this.queuedUntil.get(key) ?? 0) > this.now())) return this.queue(key, intervalMs, aheadMs, 0);
        try {
          const from = this.now();
          // A new delivery takes no slot while the endpoint's queue (any dispatcher's) is ahead of the slots.
          const behind = handBack ? undefined : { key: throttleQueueCell(merchantId, webhook.id), withinMs: aheadMs + intervalMs };
          // Back from pacing alone: the shared slots start after the ones it still holds from then.
          const aloneFor = (this.pacedAlone.get(key) ?? 0) - from;
          if (aloneFor <= 0) this.pacedAlone.delete(key);
          const answer = await takeCell(this.db, `throttle:${key}`, { intervalMs, burstMs: intervalMs, aheadMs, behind, notBeforeMs: Math.max(0, aloneFor) });
          if (++this.takes % 1_000 === 0) void sweepCells(this.db).catch(() => {});
          if (!answer.ok) {
            // Behind the queue: not refusedUntil, which sends hand-backs to the queue's back too.
            (answer.behind ? this.queuedUntil : this.refusedUntil).set(key, this.now() + answer.retryInMs);
            return this.queue(key, intervalMs, aheadMs, answer.retryInMs);
          }
          // A slot already due (0) is sent on arrival, late at most; one ahead, no earlier than SLOT_SLACK_MS before its latest place.
          const unsureMs = answer.inMs > 0 ? this.now() - from - answer.tookMs : 0;
          granted = { inMs: answer.inMs + Math.max(0, unsureMs - SLOT_SLACK_MS), from };
          // Paced alone (PostgreSQL gone), this dispatcher goes on after the slots it holds.
          this.alone.set(key, Math.max(this.alone.get(key) ?? 0, from + answer.inMs + intervalMs));
        } catch (err) {
          granted = this.takeAlone(key, intervalMs, aheadMs, err);
          if (!granted) return this.waitUntil(this.now() + aheadMs);
        }
      } finally {
        release?.();
      }
      if (granted.inMs <= 0) return this.sending(key, intervalMs);
      // Timed from the take's start, as PostgreSQL's clock: answers late by different amounts bunched slots;
      // moved later by what the round trip leaves unsure beyond SLOT_SLACK_MS (a take that waited for a connection).
      const target = granted.from + granted.inMs;
      this.stats.held++;
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, target - this.now())).unref?.());
      if (stopped()) return { kind: 'stopping' };
      if (this.now() - target <= lateAfterMs(intervalMs)) return this.sending(key, intervalMs);
    }
    return this.queue(key, intervalMs, aheadMs, 0);
  }

  /** For the adaptive rate: a 429 or 503 halves it, successes raise a lowered one (at most once a second); never waited for. */
  answered(merchantId: string, webhook: Endpoint, status: number | undefined, succeeded: boolean): void {
    const key = endpointKey(merchantId, webhook.id);
    if (status === 429 || status === 503) {
      // The rate admit() last sent it at: what was sent in the last second is 1 at a burst's start.
      const sentAt = Math.min(webhook.maxPerSecond ?? Infinity, this.current.get(key)?.rate ?? this.sentLastSecond(key));
      const ceiling = webhook.maxPerSecond ?? Math.max(1, this.sentLastSecond(key));
      lowerEndpointRate(this.db, merchantId, sentAt, ceiling, webhook.id, webhook.maxPerSecond).then(
        (rate) => {
          this.adaptive.set(key, { rate, readAt: this.now(), raisedAt: this.now() });
          if (!rate.changed) return;
          this.restretch(key, webhook, rate.previous, rate.rate);
          // Once per change, by the dispatcher that made it.
          this.logger.info('endpoint slowed: it answered 429/503', { merchantId, endpointId: webhook.id, status, ratePerSecond: Number(rate.rate.toFixed(2)) });
        },
        (err: unknown) => this.problem('endpoint rate not lowered: PostgreSQL did not answer', err),
      );
      return;
    }
    const adaptive = this.adaptive.get(key);
    if (!succeeded || !adaptive?.rate || this.now() - adaptive.raisedAt < RATE_READ_EVERY_MS) return;
    adaptive.raisedAt = this.now();
    raiseEndpointRate(this.db, merchantId, webhook.id).then(
      (rate) => {
        adaptive.rate = rate && !rate.gone ? rate : undefined;
        adaptive.readAt = this.now();
        if (rate?.changed) this.restretch(key, webhook, rate.previous, rate.gone ? undefined : rate.rate);
      },
      (err: unknown) => this.problem('endpoint rate not raised: PostgreSQL did not answer', err),
    );
  }

  /**
   * The endpoint's adaptive rate changed (undefined: none): its queue, laid out at the old rate, is
   * stretched to the new one. One stretch at a time per endpoint, the changes meanwhile folded into
   * the next (the latest rate wins): each is an UPDATE of the whole queue, and one a second (the
   * raises) queued on the rows' locks held the waits' connections.
   */
  private restretch(key: string, webhook: Endpoint, before: number | undefined, after: number | undefined): void {
    const to = Math.min(webhook.maxPerSecond ?? Infinity, after ?? Infinity);
    const running = this.stretching.get(key);
    if (running) {
      running.to = to;
      return;
    }
    const line = { to };
    this.stretching.set(key, line);
    const { merchantId, endpointId } = endpointOfKey(key);
    void (async () => {
      let laidAt = Math.min(webhook.maxPerSecond ?? Infinity, before ?? Infinity);
      while (laidAt !== line.to) {
        const target = line.to;
        try {
          await respaceThrottled(this.db, merchantId, endpointId, laidAt, target);
          laidAt = target;
        } catch (err) {
          this.problem("endpoint's queue not stretched to its new rate: PostgreSQL did not answer", err);
          break;
        }
      }
      this.stretching.delete(key);
    })();
  }

  /** A turn to take a slot of the endpoint's row; the function returned gives it to the next waiting. */
  private async turn(key: string): Promise<() => void> {
    let taking = this.taking.get(key);
    if (!taking) this.taking.set(key, (taking = { inFlight: 0, turns: [] }));
    const line = taking;
    // Handed on by the release: inFlight counts the turn already.
    if (line.inFlight >= TAKES_IN_FLIGHT) await new Promise<void>((resolve) => line.turns.push(resolve));
    else line.inFlight++;
    return () => {
      const next = line.turns.shift();
      if (next) return next();
      if (--line.inFlight === 0 && this.taking.get(key) === line) this.taking.delete(key);
    };
  }

  /** Refused a slot within reach: the next place in the endpoint's queue, and the wait until a little before it. */
  private async queue(key: string, intervalMs: number, aheadMs: number, retryInMs: number): Promise<ThrottleVerdict> {
    const asked = this.now();
    const placeAt = await new Promise<number | undefined>((resolve) => {
      let pending = this.placing.get(key);
      const first = !pending;
      if (!pending) this.placing.set(key, (pending = []));
      pending.push({ notBeforeMs: retryInMs + aheadMs, resolve });
      if (first) void this.place(key, intervalMs, aheadMs);
    });
    return this.waitUntil((placeAt ?? asked + retryInMs + aheadMs) - aheadMs / 2);
  }

  private waitUntil(dueAt: number): ThrottleVerdict {
    return { kind: 'wait', delayMs: Math.max(0, dueAt - this.now()), dueAt };
  }

  /** Takes places for whatever queued while the last batch was being taken: one statement a batch, one interval apart. */
  private async place(key: string, intervalMs: number, aheadMs: number): Promise<void> {
    for (;;) {
      const batch = this.placing.get(key) ?? [];
      if (batch.length === 0) {
        this.placing.delete(key);
        return;
      }
      this.placing.set(key, []);
      const notBeforeMs = Math.max(...batch.map((p) => p.notBeforeMs));
      try {
        const { merchantId, endpointId } = endpointOfKey(key);
        const place = await takeCell(this.db, throttleQueueCell(merchantId, endpointId), { intervalMs, burstMs: intervalMs, aheadMs: Number.MAX_SAFE_INTEGER, notBeforeMs, count: batch.length });
        const first = this.now() + (place.ok ? place.inMs : place.retryInMs);
        batch.forEach((p, i) => p.resolve(first + i * intervalMs));
        // Until the last place's slot is within reach, the queue is ahead of the slots.
        this.queuedUntil.set(key, first + (batch.length - 1) * intervalMs - aheadMs);
      } catch {
        for (const p of batch) p.resolve(undefined);
      }
    }
  }

  /** A go; at a slot of a rate (`intervalMs`), late once held past the slot by more than lateAfterMs. */
  private sending(key: string, intervalMs?: number): ThrottleVerdict {
    const at = this.now();
    const second = Math.floor(at / 1000);
    const sent = this.sent.get(key);
    if (!sent) this.sent.set(key, { second, count: 1, last: 0 });
    else if (sent.second === second) sent.count++;
    else {
      sent.last = sent.second === second - 1 ? sent.count : 0;
      sent.second = second;
      sent.count = 1;
    }
    if (intervalMs === undefined) return { kind: 'go' };
    return { kind: 'go', late: () => this.now() - at > lateAfterMs(intervalMs) };
  }

  private sentLastSecond(key: string): number {
    const sent = this.sent.get(key);
    return Math.max(1, sent?.count ?? 0, sent?.last ?? 0);
  }

  /** The adaptive rate, read again when older than RATE_READ_EVERY_MS; `configured` (a maxPerSecond): its absence is remembered too. */
  private async readAdaptive(key: string, configured: boolean): Promise<void> {
    let adaptive = this.adaptive.get(key);
    if (adaptive && this.now() - adaptive.readAt < RATE_READ_EVERY_MS) return;
    if (!adaptive) this.adaptive.set(key, (adaptive = { rate: undefined, readAt: -Infinity, raisedAt: -Infinity }));
    const reading = (adaptive.reading ??= endpointRateOf(this.db, endpointOfKey(key).merchantId, endpointOfKey(key).endpointId).then(
      (rate) => {
        adaptive.rate = rate;
        adaptive.readAt = this.now();
      },
      (err: unknown) => {
        adaptive.readAt = this.now();
        this.problem('endpoint rate not read: PostgreSQL did not answer; the last one read is used', err);
      },
    ).finally(() => (adaptive.reading = undefined)));
    await reading;
    // An unlimited endpoint whose row is gone (recovered) is forgotten: no more reads for it.
    if (!configured && !adaptive.rate && this.adaptive.get(key) === adaptive) this.adaptive.delete(key);
  }

  /** Once a RATES_ADOPTED_EVERY_MS, in the background: the lowered rates this dispatcher holds nothing of. */
  private adoptRates(): void {
    if (this.now() - this.adoptedAt < RATES_ADOPTED_EVERY_MS) return;
    this.adoptedAt = this.now();
    endpointRates(this.db, REMEMBERED_ENDPOINTS).then(
      (rows) => {
        for (const { merchantId, endpointId, ...rate } of rows) {
          const key = endpointKey(merchantId, endpointId);
          if (!this.adaptive.has(key)) this.adaptive.set(key, { rate, readAt: this.now(), raisedAt: -Infinity });
        }
      },
      (err: unknown) => this.problem('lowered endpoint rates not read: PostgreSQL did not answer', err),
    );
  }

  /** PostgreSQL does not answer: this dispatcher paces the endpoint alone (n dispatchers, up to n times its rate). */
  private takeAlone(key: string, intervalMs: number, aheadMs: number, err: unknown): { inMs: number; from: number } | undefined {
    this.problem('throttle not shared: PostgreSQL did not answer; this dispatcher paces the endpoint alone', err);
    const now = this.now();
    const slot = Math.max(now, this.alone.get(key) ?? 0);
    if (slot - now > aheadMs) return undefined;
    this.alone.set(key, slot + intervalMs);
    this.pacedAlone.set(key, slot + intervalMs);
    return { inMs: slot - now, from: now };
  }
}
