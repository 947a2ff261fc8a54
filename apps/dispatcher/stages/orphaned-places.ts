import type { ConsumeMessage } from 'amqplib';
import type { Delivery } from '../../../libs/broker/index.js';
import { HEADERS, orderKeyOf } from '../../../libs/contracts/index.js';
import type { Logger } from '../../../libs/logger/index.js';
import type { MerchantDirectory } from '../../../libs/merchants/index.js';
import { type OrderEnd, type OrderGate, orderingLines } from '../../../libs/ordering/index.js';
import type { Finding } from './decide.js';
import { envelopeOf, handBackOf, hasIllFormedMessageId, type IntakeEvent, webhookIdOf } from './intake.js';

export interface OrphanedPlacesDeps {
  /** Order per reference; without it there is nothing to end. */
  order?: OrderGate;
  merchants: MerchantDirectory;
  logger: Logger;
  /** The upstream exchange's name: only its messages took places at intake. */
  events: string;
}

/**
 * A message from upstream that the broker gives again: the places in order its earlier walk took
 * (a row, no wait) at endpoints this walk will not go to (deleted, turned off, or settled: a
 * repeat whose record was written and whose end was not) are ended now, or the webhooks waiting
 * behind them (with no due time) would wait for ever. Those it goes to are stepped as before.
 * PostgreSQL not answering the look-up: a merchant none of whose endpoints orders now goes on (its
 * places are released by the upkeep, libs/ordering/upkeep.ts); one with an endpoint that orders is
 * held, as its steps are (a stop too: its channel closes, and the broker gives it again), since no
 * upkeep releases a line that orders. False: its channel is gone.
 */
export async function endOrphanedPlaces(delivery: Delivery, intake: IntakeEvent, finding: Finding | undefined, deps: OrphanedPlacesDeps): Promise<boolean> {
  const { message } = delivery;
  const { order, logger } = deps;
  if (!order || !message.fields.redelivered || message.fields.exchange !== deps.events || intake.orderKey === undefined || intake.test) return true;
  const walked = finding?.kind === 'fan-out' ? finding.endpointIds : finding === undefined ? [intake.endpointId ?? ''] : [];
  const places = await lookUp(delivery, order, { merchantId: intake.merchantId, webhookId: intake.webhookId, key: intake.orderKey }, deps);
  if (places === undefined) return false;
  const orphans = places.filter((endpointId) => !walked.includes(endpointId));
  // An end is tried again while PostgreSQL does not answer (the gate's batcher); one it refuses for its data is left.
  await Promise.all(orphans.map((endpointId) => order.end({ merchantId: intake.merchantId, endpointId, webhookId: intake.webhookId }))).catch((err: unknown) => {
    logger.warn('places in order of a redelivered webhook not ended: PostgreSQL refused it', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error)?.message });
  });
  return true;
}

/**
 * A message parked before its step (it fails intake, `too-large` once MAX_MESSAGE_BYTES was lowered
 * say, or an unexpected error) that may have taken places in order on an earlier walk: given again
 * by the broker, a fan-out share handed on, or moved back from invalid (walkedBefore). Its
 * park ends those places (open, with no wait), as any parked head's does: its line may still order,
 * so no upkeep would release them, and the webhooks behind them waited for ever. Read best effort
 * from its body, whatever its size (it was read whole when it took them): one that does not name a
 * merchant and a key took none. Not a hand-back (its wait ends with its park, or is someone
 * else's). `endpointId`: one endpoint's share of a fan-out, parked alone. The places to end with
 * its park; undefined: its channel is gone.
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
  // A copy for one endpoint (x-endpoint-id, ours alone) took its place there only.
  const only = endpointId ?? (ours && typeof headers[HEADERS.endpointId] === 'string' ? headers[HEADERS.endpointId] : undefined);
  return places.filter((id) => only === undefined || id === only).map((id) => ({ merchantId: place.merchantId, endpointId: id, webhookId: place.webhookId }));
}

/**
 * Whether a copy may have walked before: redelivered, a fan-out share handed on (x-endpoint-id), or
 * moved back from invalid. Those headers only on our own copies: on upstream's publish (through
 * `events`) they are forged or copied, and made every such message of an ordering merchant cost a
 * look-up, held while PostgreSQL was down instead of parked.
 */
export function walkedBefore(message: ConsumeMessage, events: string): boolean {
  const headers = message.properties.headers ?? {};
  if (message.fields.redelivered) return true;
  return message.fields.exchange !== events && (headers[HEADERS.endpointId] !== undefined || headers[HEADERS.originalRoutingKey] !== undefined);
}

/**
 * The merchant, webhook id and order key a message's body names, if it does: only a valid envelope
 * with a valid messageId could take a place. Looked up, an id PostgreSQL cannot hold (a NUL) was
 * refused, taken for an outage, and the message held unacked for ever instead of parked.
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
 * for a merchant none of whose endpoints orders now (the upkeep releases its places); held and
 * asked again each second while one does. Undefined: its channel is gone.
 */
async function lookUp(delivery: Delivery, order: OrderGate, place: { merchantId: string; webhookId: string; key: string }, deps: OrphanedPlacesDeps): Promise<string[] | undefined> {
  const { merchants, logger } = deps;
  for (let tries = 0; ; tries++) {
    try {
      return await order.openPlaces(place.merchantId, place.webhookId, place.key);
    } catch (err) {
      // Held while one of its endpoints orders now: the lines the upkeep never releases.
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
