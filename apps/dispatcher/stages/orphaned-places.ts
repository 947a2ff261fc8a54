import type { ConsumeMessage } from 'amqplib';
import type { Delivery } from '../../../libs/broker/index.js';
import { HEADERS, orderKeyOf } from '../../../libs/contracts/index.js';
import type { Logger } from '../../../libs/logger/index.js';
import type { MerchantDirectory } from '../../../libs/merchants/index.js';
import { type OrderEnd, type OrderGate, orderingLines } from '../../../libs/ordering/index.js';
import type { Finding } from './decide.js';
import { envelopeOf, handBackOf, hasIllFormedMessageId, type IntakeEvent, webhookIdOf } from './intake.js';

export interface OrphanedPlacesDeps {
  order?: OrderGate;
  merchants: MerchantDirectory;
  logger: Logger;
  /** The upstream exchange's name: only its messages took places at intake. */
  events: string;
}

/**
 * A message from upstream that the broker gives again: the places in order its earlier walk took at
 * endpoints this walk will not go to are ended now, or the webhooks behind them would wait for ever.
 * PostgreSQL not answering, see lookUp. False: its channel is gone.
 */
export async function endOrphanedPlaces(delivery: Delivery, intake: IntakeEvent, finding: Finding | undefined, deps: OrphanedPlacesDeps): Promise<boolean> {
  const { message } = delivery;
  const { order, logger } = deps;
  if (!order || !message.fields.redelivered || message.fields.exchange !== deps.events || intake.orderKey === undefined || intake.test) return true;
  const walked = finding?.kind === 'fan-out' ? finding.endpointIds : finding === undefined ? [intake.endpointId ?? ''] : [];
  const places = await lookUp(delivery, order, { merchantId: intake.merchantId, webhookId: intake.webhookId, key: intake.orderKey }, deps);
  if (places === undefined) return false;
  const orphans = places.filter((endpointId) => !walked.includes(endpointId));
  // The gate retries an end while PostgreSQL does not answer; one it refuses for its data is left.
  await Promise.all(orphans.map((endpointId) => order.end({ merchantId: intake.merchantId, endpointId, webhookId: intake.webhookId }))).catch((err: unknown) => {
    logger.warn('places in order of a redelivered webhook not ended: PostgreSQL refused it', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error)?.message });
  });
  return true;
}

/**
 * A message parked before its step (failed intake, or an unexpected error) that may have taken
 * places in order on an earlier walk (walkedBefore): its park ends them, or the webhooks behind them
 * wait for ever. Read best effort from its body. Not a hand-back (its wait ends with its park).
 * `endpointId`: one endpoint's share of a fan-out, parked alone. Undefined: its channel is gone.
 */
export async function parkedPlaces(delivery: Delivery, deps: OrphanedPlacesDeps, endpointId?: string): Promise<OrderEnd[] | undefined> {
  const { message } = delivery;
  const { order } = deps;
  const headers = message.properties.headers ?? {};
  const ours = message.fields.exchange !== deps.events;
  // Nor a resend's copy or a test event: neither takes a place (Dispatcher.placeInOrder).
  if (!order || handBackOf(message, deps.events) !== undefined || headers[HEADERS.testEvent] === true || (ours && headers[HEADERS.resentAt] !== undefined)) return [];
  if (!walkedBefore(message, deps.events)) return [];
  const place = placeOf(message);
  if (!place) return [];
  const places = await lookUp(delivery, order, place, deps);
  if (places === undefined) return undefined;
  const only = endpointId ?? (ours && typeof headers[HEADERS.endpointId] === 'string' ? headers[HEADERS.endpointId] : undefined);
  return places.filter((id) => only === undefined || id === only).map((id) => ({ merchantId: place.merchantId, endpointId: id, webhookId: place.webhookId }));
}

/**
 * Whether a copy may have walked before: redelivered, a fan-out share handed on (x-endpoint-id), or
 * moved back from invalid. Those headers count only on our own copies, not on upstream's publish.
 */
export function walkedBefore(message: ConsumeMessage, events: string): boolean {
  const headers = message.properties.headers ?? {};
  if (message.fields.redelivered) return true;
  return message.fields.exchange !== events && (headers[HEADERS.endpointId] !== undefined || headers[HEADERS.originalRoutingKey] !== undefined);
}

/**
 * The merchant, webhook id and order key a message's body names: only a valid envelope with a valid
 * messageId could take a place (looked up, an id PostgreSQL cannot hold would pass for an outage).
 */
function placeOf(message: ConsumeMessage): { merchantId: string; webhookId: string; key: string } | undefined {
  if (hasIllFormedMessageId(message)) return undefined;
  try {
    const { merchantId, event, data } = envelopeOf(JSON.parse(message.content.toString('utf8')));
    const key = orderKeyOf(event, data);
    return key === undefined ? undefined : { merchantId, webhookId: webhookIdOf(message), key };
  } catch {
    return undefined;
  }
}

/**
 * The endpoints where the webhook holds an open place with no wait. PostgreSQL not answering: []
 * for a merchant none of whose endpoints orders now (the upkeep releases its places); else held and
 * asked again each second, since no upkeep releases a line that orders. Undefined: its channel is gone.
 */
async function lookUp(delivery: Delivery, order: OrderGate, place: { merchantId: string; webhookId: string; key: string }, deps: OrphanedPlacesDeps): Promise<string[] | undefined> {
  const { merchants, logger } = deps;
  for (let tries = 0; ; tries++) {
    try {
      return await order.openPlaces(place.merchantId, place.webhookId, place.key);
    } catch (err) {
      const merchant = merchants.byId(place.merchantId);
      const held = merchant !== undefined && orderingLines([merchant]).length > 0;
      if (!held) {
        logger.warn('places in order of a redelivered webhook not looked up: PostgreSQL did not answer', { merchantId: place.merchantId, webhookId: place.webhookId, error: (err as Error)?.message });
        return [];
      }
      if (tries % 30 === 0) logger.warn('places in order of a redelivered webhook not looked up: PostgreSQL did not answer; held until it does', { merchantId: place.merchantId, webhookId: place.webhookId, error: (err as Error)?.message });
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      if (!delivery.live) return undefined;
    }
  }
}
