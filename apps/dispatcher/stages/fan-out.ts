import type { Delivery } from '../../../libs/broker/index.js';
import { PLATFORM_MERCHANT_ID } from '../../../libs/contracts/index.js';
import { type MerchantDirectory, matchingEndpoints, receivesEvent } from '../../../libs/merchants/index.js';
import { PLATFORM_ENDPOINT_ID } from '../platform.js';
import { unavailableOf } from './admission.js';
import type { Finding } from './decide.js';
import type { IntakeEvent } from './intake.js';

/**
 * Which endpoint a message without x-endpoint-id is for. A new event (from upstream's exchange, an
 * operational event, a test event) with one matching endpoint is that endpoint's delivery, as it
 * is. With several, a 'fan-out': each endpoint's delivery is walked from this one message, in this
 * process (fanOut). With none, why (skipped). A copy accepted before events were fanned out (a
 * wait or a failure without an endpoint) keeps going to the merchant's first endpoint (admission).
 */
export function route(intake: IntakeEvent, merchants: MerchantDirectory): Finding | undefined {
  if (intake.endpointId !== undefined) return undefined;
  if (intake.merchantId === PLATFORM_MERCHANT_ID) {
    intake.endpointId = PLATFORM_ENDPOINT_ID;
    return undefined;
  }
  // Accepted without an endpoint: written before events were fanned out (or by a dispatcher not
  // yet upgraded), its wait row keyed ''; admission sends it to the merchant's first endpoint.
  if (intake.accepted) return undefined;
  const merchant = merchants.byId(intake.merchantId);
  if (!merchant) return undefined;
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

/**
 * One endpoint's share of a fanned-out message, a Delivery over the original for that endpoint's
 * walk: its ack (or a move's: a copy to `failed` or `invalid` with its x-endpoint-id, then the ack)
 * says that endpoint is done; the original is acked once every share is. A nack with requeue
 * (transient broker trouble, stopping) is 'returned': requeueing the original would deliver the
 * others again, so fanOut hands that endpoint on instead. A nack without requeue (never used by
 * the stages) drops that endpoint's share alone.
 */
export class EndpointShare implements Delivery {
  state: 'held' | 'done' | 'returned' = 'held';

  constructor(private readonly original: Delivery) {}

  get message() {
    return this.original.message;
  }

  /** The original's channel: once it is gone the broker has returned the original, every share with it. */
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
 * A new event for several endpoints, from one message: each endpoint's delivery is walked at once
 * (`walk`: its order line, admission, attempt, decision, record and effect), on its own copy of the
 * intake (the walk sets its endpointId, ordered, ...), and the original is acked only when every
 * endpoint's effect is done (delivered, its wait written, its failure moved, its record written).
 *
 * An endpoint whose walk returned its share (a move the broker did not take, or stopping while it
 * waited for a slot) is handed on (`handOn`: its copy to `dispatch` with x-endpoint-id, confirmed,
 * as events were fanned out before), so that the endpoints already done are not delivered again.
 * Holding the original instead would end in its requeue, or its redelivery at the next reconnect:
 * every endpoint again. Only a copy the broker does not take either returns the original to its
 * queue, after the other walks end: its redelivery may send those again (same webhook-id), never
 * none. A crash before the original's ack does the same (docs/guarantees.md).
 */
export async function fanOut(
  original: Delivery,
  intake: IntakeEvent,
  endpointIds: readonly string[],
  walk: (share: Delivery, intake: IntakeEvent) => Promise<void>,
  handOn: (share: Delivery, intake: IntakeEvent) => Promise<unknown>,
): Promise<void> {
  const shares = endpointIds.map(() => new EndpointShare(original));
  const intakes = endpointIds.map((endpointId): IntakeEvent => ({ ...intake, endpointId }));
  await Promise.all(shares.map((share, i) => walk(share, intakes[i]!)));
  // Its channel gone, the broker has returned the original: its redelivery walks every endpoint again.
  if (!original.live) return;
  const handing: Promise<unknown>[] = [];
  shares.forEach((share, i) => {
    if (share.state === 'done') return;
    share.state = 'held';
    // A fresh copy of the intake: the walk's marks (ordered, a place it gave back) are not the copy's.
    handing.push(handOn(share, { ...intake, endpointId: endpointIds[i]! }));
  });
  if (handing.length > 0) await Promise.all(handing);
  if (!original.live) return;
  if (shares.every((share) => share.state === 'done')) original.ack();
  else original.nack(true);
}
