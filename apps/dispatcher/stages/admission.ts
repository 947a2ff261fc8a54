import { PLATFORM_MERCHANT_ID } from '../../../libs/contracts/index.js';
import { type Merchant, type MerchantDirectory, receivesEvent, type Endpoint } from '../../../libs/merchants/index.js';
import type { RetryPolicy } from '../../../libs/retry-policy/index.js';
import type { Finding, Unavailable } from './decide.js';
import { type Admission as Slot, EndpointGuards, endpointOf } from './endpoint-guards.js';
import type { IntakeEvent } from './intake.js';
import type { Throttle } from './throttle.js';

/** Admitted: the webhook to POST to and a slot on its endpoint, released by the attempt. */
export interface Admitted {
  kind: 'admitted';
  webhook: Endpoint;
  slot: Extract<Slot, { kind: 'send' }>;
}

/**
 * Admission: is there someone to send this to, and may it go now? The directory (merchant,
 * active webhook, event filter), then the endpoint's throttle, then its guards (circuit breaker, bulkhead).
 */
export class AdmissionStage {
  /** Webhook URL → endpoint: parsing a URL per delivery costs more than the rest of admission. */
  private readonly endpoints = new Map<string, string>();

  constructor(
    private readonly merchants: MerchantDirectory,
    readonly guards: EndpointGuards,
    private readonly policy: RetryPolicy,
    /** The platform's endpoint (OPERATIONAL_WEBHOOK_URL), from the dispatcher's config: never in the directory. */
    private readonly platform?: Merchant,
    /** The endpoints' throttle (maxPerSecond, and the rate their 429/503 answers set); none without PostgreSQL. */
    private readonly throttle?: Throttle,
  ) {}

  async admit(intake: IntakeEvent, now: Date, stopped: () => boolean): Promise<Admitted | Finding> {
    const target = this.target(intake);
    if (target.kind === 'unavailable') return target;
    const { webhook } = target;
    // A resend is the merchant saying "fixed": its first attempt goes through an open circuit.
    // So does a webhook never attempted whose span is over: nothing reaches failed untried.
    const force = intake.attempts === 0 && (intake.resentAt !== undefined || this.policy.spanOver(intake.resentAt ?? intake.firstSeenAt, now));
    const endpoint = this.endpointOf(webhook.url);
    // The throttle: a slot of the endpoint's rate (held until it comes), or a wait as a row. Not
    // while its circuit is open: the circuit decides then (postponed, parked behind wait_circuits).
    // A dead endpoint's 503s lower its rate, and taken first the throttle made its webhooks
    // 'throttled' waits at places of its queue hours ahead, none of them telling the circuit's row.
    const circuitDecides = !force && this.guards.refusing(endpoint);
    const throttled = this.throttle && !circuitDecides ? await this.throttle.admit(intake.merchantId, webhook, stopped, intake.hand !== undefined) : undefined;
    if (throttled?.kind === 'stopping') return { kind: 'stopping' };
    if (throttled?.kind === 'wait') return { kind: 'throttled', delayMs: throttled.delayMs };
    // Its span over while the circuit kept it postponed: an attempt unless the endpoint's line is
    // full, then it fails as the circuit would have it (a resend, the merchant's word, waits its turn).
    const spanOver = force && intake.resentAt === undefined && this.guards.refusing(endpoint);
    const slot = await this.guards.acquire(
      endpoint,
      { merchantId: intake.merchantId, endpointId: webhook.id, canDefer: this.policy.canDefer(intake.deferrals), deferralsSpent: this.policy.deferralsSpent(intake.deferrals), force, spanOver },
      stopped,
    );
    if (!slot) return { kind: 'stopping' };
    if (slot.kind === 'defer') return { kind: 'busy' };
    if (slot.kind === 'open') return { kind: 'circuit-open', failures: slot.failures, retryInMs: slot.retryInMs, lastError: slot.lastError };
    // It may have waited seconds for its slot (or its rate): the endpoint turned off or deleted
    // meanwhile receives nothing more, as it would once the directory had it (within a second).
    const latest = this.target(intake);
    if (latest.kind === 'unavailable') {
      slot.release('unused');
      return latest;
    }
    return { kind: 'admitted', webhook, slot };
  }

  /** The endpoint this delivery goes to, as the directory has it now, or why none. */
  private target(intake: IntakeEvent): { kind: 'endpoint'; webhook: Endpoint } | Extract<Finding, { kind: 'unavailable' }> {
    const merchant = intake.merchantId === PLATFORM_MERCHANT_ID ? this.platform : this.merchants.byId(intake.merchantId);
    if (!merchant) return { kind: 'unavailable', why: 'merchant-removed' };
    const webhook = endpointFor(merchant, intake);
    // The merchant chose its events: one it does not receive is treated like a disabled webhook.
    if (!webhook?.enabled || !receivesEvent(webhook, intake.event)) return { kind: 'unavailable', why: unavailableOf(webhook ? [webhook] : []) };
    return { kind: 'endpoint', webhook };
  }

  private endpointOf(url: string): string {
    let endpoint = this.endpoints.get(url);
    if (endpoint === undefined) {
      if (this.endpoints.size >= 10_000) this.endpoints.clear();
      endpoint = endpointOf(url);
      this.endpoints.set(url, endpoint);
    }
    return endpoint;
  }
}

/**
 * The endpoint this copy is for: the one its x-endpoint-id names (undefined once deleted), or for
 * a copy without one (an event with one matching endpoint, or one accepted before events were
 * fanned out, when a merchant had one endpoint) the merchant's first.
 */
export function endpointFor(merchant: Merchant, intake: Pick<IntakeEvent, 'endpointId'>): Endpoint | undefined {
  if (intake.endpointId === undefined) return merchant.endpoints[0];
  return merchant.endpoints.find((endpoint) => endpoint.id === intake.endpointId);
}

/**
 * Why none of these endpoints (a merchant's, or the one a copy is for) takes an event that no
 * enabled one of them receives: an enabled one filters it out; else an endpoint turned off by
 * auto-disable is said apart, so the merchant's log tells it from its own choice; none at all (a
 * deleted endpoint) is like a disabled webhook. Both routing and admission ask it.
 */
export function unavailableOf(endpoints: readonly Endpoint[]): Unavailable {
  if (endpoints.some((endpoint) => endpoint.enabled)) return 'event-not-subscribed';
  return endpoints.some((endpoint) => endpoint.disabledReason === 'failing') ? 'endpoint-disabled' : 'webhook-disabled';
}
