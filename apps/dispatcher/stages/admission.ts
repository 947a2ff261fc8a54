import { PLATFORM_MERCHANT_ID } from '../../../libs/contracts/index.js';
import { type Merchant, type MerchantDirectory, receivesEvent, type Endpoint } from '../../../libs/merchants/index.js';
import type { RetryPolicy } from '../../../libs/retry-policy/index.js';
import { BoundedMap } from '../../../libs/runtime/index.js';
import type { Finding, Unavailable } from './decide.js';
import { type Admission as Slot, EndpointGuards } from './endpoint-guards.js';
import { endpointOf } from './endpoint-key.js';
import type { IntakeEvent } from './intake.js';
import type { Throttle } from './throttle.js';

/** Admitted: the webhook to POST to and a slot on its endpoint, released by the attempt. */
export interface Admitted {
  kind: 'admitted';
  webhook: Endpoint;
  slot: Extract<Slot, { kind: 'send' }>;
}

/** Admission: the directory (merchant, enabled endpoint, event filter), then the endpoint's throttle, then its guards. */
export class AdmissionStage {
  /** Merchant, endpoint id and URL → the breaker's key: no URL parsed per delivery. */
  private readonly endpoints = new BoundedMap<string, string>(10_000);

  constructor(
    private readonly merchants: MerchantDirectory,
    readonly guards: EndpointGuards,
    private readonly policy: RetryPolicy,
    private readonly platform?: Merchant,
    private readonly throttle?: Throttle,
  ) {}

  /**
   * `retake`: a hand-back's take again once it has its request slot (its lease may not cover the
   * attempt); a finding ends the walk. Taken before the throttle's lateness is judged: a slow take
   * must not send its slot late, bunched with the next.
   */
  async admit(intake: IntakeEvent, now: Date, stopped: () => boolean, retake?: () => Promise<Finding | undefined>): Promise<Admitted | Finding> {
    const target = this.target(intake);
    if (target.kind === 'unavailable') return target;
    const { webhook } = target;
    // A resend's first attempt goes through an open circuit (the merchant says "fixed"), as does a
    // webhook never attempted whose span is over: nothing reaches failed untried.
    const force = intake.attempts === 0 && (intake.resentAt !== undefined || this.policy.spanOver(intake.resentAt ?? intake.firstSeenAt, now));
    const endpoint = this.endpointOf(intake.merchantId, webhook);
    // Not the throttle while the circuit is open, nor for the row's probe: the circuit decides then.
    const probe = intake.probe === true;
    const circuitDecides = probe || (!force && this.guards.openUntil(endpoint) > 0);
    const throttled = this.throttle && !circuitDecides ? await this.throttle.admit(intake.merchantId, webhook, stopped, intake.hand !== undefined) : undefined;
    if (throttled?.kind === 'stopping') return { kind: 'stopping' };
    if (throttled?.kind === 'wait') return { kind: 'throttled', delayMs: throttled.delayMs };
    // Its span over while the circuit kept it postponed: an attempt unless the endpoint's line is full.
    const spanOver = force && intake.resentAt === undefined && this.guards.openUntil(endpoint) > 0;
    const slot = await this.guards.acquire(
      endpoint,
      { merchantId: intake.merchantId, endpointId: webhook.id, canDefer: this.policy.canDefer(intake.deferrals), deferralsSpent: this.policy.deferralsSpent(intake.deferrals), force, probe, spanOver },
      stopped,
    );
    if (!slot) return { kind: 'stopping' };
    if (slot.kind === 'defer') return { kind: 'busy' };
    if (slot.kind === 'open') return { kind: 'circuit-open', failures: slot.failures, retryInMs: slot.retryInMs, lastError: slot.lastError };
    const retaken = await retake?.();
    if (retaken) {
      slot.release('unused');
      return retaken;
    }
    // Its throttle slot passed while it waited for a request slot: sent now, all that waited so would
    // go at once. It keeps the request slot and takes a throttle slot again, in its turn.
    if (throttled?.kind === 'go' && throttled.late?.()) {
      const again = await this.throttle!.admit(intake.merchantId, webhook, stopped, true);
      if (again.kind !== 'go') {
        slot.release('unused');
        return again.kind === 'wait' ? { kind: 'throttled', delayMs: again.delayMs } : { kind: 'stopping' };
      }
    }
    // It may have waited seconds: an endpoint turned off or deleted meanwhile gets nothing more.
    const latest = this.target(intake);
    if (latest.kind === 'unavailable') {
      slot.release('unused');
      return latest;
    }
    // Moved meanwhile: the new URL is admitted afresh.
    if (latest.webhook.url !== webhook.url) {
      slot.release('unused');
      return this.admit(intake, now, stopped, retake);
    }
    // Signed as the endpoint is now: a secret replaced at once signs nothing more.
    return { kind: 'admitted', webhook: latest.webhook, slot };
  }

  /** The endpoint this delivery goes to, as the directory has it now, or why none. */
  private target(intake: IntakeEvent): { kind: 'endpoint'; webhook: Endpoint } | Extract<Finding, { kind: 'unavailable' }> {
    const merchant = intake.merchantId === PLATFORM_MERCHANT_ID ? this.platform : this.merchants.byId(intake.merchantId);
    if (!merchant) return { kind: 'unavailable', why: 'merchant-removed' };
    const webhook = endpointFor(merchant, intake);
    if (!webhook?.enabled || !receivesEvent(webhook, intake.event)) return { kind: 'unavailable', why: unavailableOf(webhook ? [webhook] : []) };
    return { kind: 'endpoint', webhook };
  }

  /** The breaker's key of a circuit row's endpoint ('' is a wait's from before endpoints), or undefined when it has none. */
  keyOfCircuit(merchantId: string, endpointId: string): string | undefined {
    const merchant = merchantId === PLATFORM_MERCHANT_ID ? this.platform : this.merchants.byId(merchantId);
    const webhook = endpointFor(merchant, { endpointId: endpointId === '' ? undefined : endpointId });
    return webhook && this.endpointOf(merchantId, webhook);
  }

  private endpointOf(merchantId: string, webhook: Pick<Endpoint, 'id' | 'url'>): string {
    const key = `${merchantId}\u001f${webhook.id}\u001f${webhook.url}`;
    let endpoint = this.endpoints.get(key);
    if (endpoint === undefined) this.endpoints.set(key, (endpoint = endpointOf(merchantId, webhook.id, webhook.url)));
    return endpoint;
  }
}

/** The endpoint this copy is for: the one its x-endpoint-id names (undefined once deleted), else the merchant's first. */
export function endpointFor(merchant: Merchant | undefined, intake: Pick<IntakeEvent, 'endpointId'>) {
  if (intake.endpointId === undefined) return merchant?.endpoints[0];
  return merchant?.endpoints.find((endpoint) => endpoint.id === intake.endpointId);
}

/** Why none of these endpoints takes the event: an enabled one filters it out, else auto-disable or the merchant's choice. */
export function unavailableOf(endpoints: readonly Endpoint[]): Unavailable {
  if (endpoints.some((endpoint) => endpoint.enabled)) return 'event-not-subscribed';
  return endpoints.some((endpoint) => endpoint.disabledReason === 'failing') ? 'endpoint-disabled' : 'webhook-disabled';
}
