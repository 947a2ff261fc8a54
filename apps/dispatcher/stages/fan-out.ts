import type { Delivery } from '../../../libs/broker/index.js';
import { PLATFORM_MERCHANT_ID } from '../../../libs/contracts/index.js';
import { type MerchantDirectory, matchingEndpoints, receivesEvent } from '../../../libs/merchants/index.js';
import { PLATFORM_ENDPOINT_ID } from '../platform.js';
import { unavailableOf } from './admission.js';
import type { Finding } from './decide.js';
import type { IntakeEvent } from './intake.js';

/** Which endpoint a message without x-endpoint-id is for: its one matching endpoint (set), several ('fan-out'), or none. */
export function route(intake: IntakeEvent, merchants: MerchantDirectory): Finding | undefined {
  if (intake.endpointId !== undefined) return undefined;
  if (intake.merchantId === PLATFORM_MERCHANT_ID) {
    intake.endpointId = PLATFORM_ENDPOINT_ID;
    return undefined;
  }
  // Accepted before events were fanned out (its wait keyed ''): admission sends it to the merchant's first endpoint.
  if (intake.accepted) return undefined;
  const merchant = merchants.byId(intake.merchantId);
  // Parked (unknown-merchant) by decide, before intake's key check, which it skips.
  if (!merchant) return { kind: 'unavailable', why: 'merchant-removed' };
  // Most merchants have one endpoint: no list made per delivery for them.
  const only = merchant.endpoints.length === 1 ? merchant.endpoints[0]! : undefined;
  if (only?.enabled && receivesEvent(only, intake.event)) {
    intake.endpointId = only.id;
    return undefined;
  }
  const matching = matchingEndpoints(merchant, intake.event);
  if (matching.length === 1) {
    intake.endpointId = matching[0]!.id;
    return undefined;
  }
  if (matching.length > 1) return { kind: 'fan-out', endpointIds: matching.map((endpoint) => endpoint.id) };
  return { kind: 'unavailable', why: unavailableOf(merchant.endpoints) };
}

/** One endpoint's share of a fanned-out message. A nack with requeue is 'returned': fanOut hands that endpoint on. */
class EndpointShare implements Delivery {
  state: 'held' | 'done' | 'returned' = 'held';

  constructor(private readonly original: Delivery) {}

  get message() {
    return this.original.message;
  }

  get live(): boolean {
    return this.original.live;
  }

  ack(): void {
    if (this.state === 'held') this.state = 'done';
  }

  nack(requeue: boolean): void {
    if (this.state === 'held') this.state = requeue ? 'returned' : 'done';
  }
}

/**
 * A new event for several endpoints: each endpoint's walk at once, on its own copy of the intake;
 * the original acked once every endpoint's effect is done. A share returned is handed on (its own
 * copy to `dispatch`), so those done are not delivered again; only a copy the broker does not take
 * returns the original.
 */
export async function fanOut(
  original: Delivery, intake: IntakeEvent, endpointIds: readonly string[],
  walk: (share: Delivery, intake: IntakeEvent) => Promise<void>,
  handOn: (share: Delivery, intake: IntakeEvent) => Promise<unknown>,
): Promise<void> {
  const shares = endpointIds.map(() => new EndpointShare(original));
  await Promise.all(shares.map((share, i) => walk(share, { ...intake, endpointId: endpointIds[i]! })));
  // Its channel gone, the broker has returned the original.
  if (!original.live) return;
  const handing: Promise<unknown>[] = [];
  shares.forEach((share, i) => {
    if (share.state === 'done') return;
    share.state = 'held';
    // A fresh copy of the intake: the walk's marks are not the copy's.
    handing.push(handOn(share, { ...intake, endpointId: endpointIds[i]! }));
  });
  if (handing.length > 0) await Promise.all(handing);
  if (!original.live) return;
  if (shares.every((share) => share.state === 'done')) original.ack();
  else original.nack(true);
}
