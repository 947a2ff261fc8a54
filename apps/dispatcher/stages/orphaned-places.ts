import type { Delivery } from '../../../libs/broker/index.js';
import type { Logger } from '../../../libs/logger/index.js';
import type { MerchantDirectory } from '../../../libs/merchants/index.js';
import { type OrderGate, orderingLines } from '../../../libs/ordering/index.js';
import type { Finding } from './decide.js';
import type { IntakeEvent } from './intake.js';

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
  const { order, merchants, logger } = deps;
  if (!order || !message.fields.redelivered || message.fields.exchange !== deps.events || intake.orderKey === undefined || intake.test) return true;
  const walked = finding?.kind === 'fan-out' ? finding.endpointIds : finding === undefined ? [intake.endpointId ?? ''] : [];
  let places: string[] | undefined;
  for (let tries = 0; places === undefined; tries++) {
    try {
      places = await order.openPlaces(intake.merchantId, intake.webhookId, intake.orderKey);
    } catch (err) {
      // Held while one of its endpoints orders now: the lines the upkeep never releases.
      const merchant = merchants.byId(intake.merchantId);
      const held = merchant !== undefined && orderingLines([merchant]).length > 0;
      if (!held) {
        logger.warn('places in order of a redelivered webhook not looked up: PostgreSQL did not answer', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error)?.message });
        return true;
      }
      if (tries % 30 === 0) logger.warn('places in order of a redelivered webhook not looked up: PostgreSQL did not answer; held until it does', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error)?.message });
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      if (!delivery.live) return false;
    }
  }
  const orphans = places.filter((endpointId) => !walked.includes(endpointId));
  // An end is tried again while PostgreSQL does not answer (the gate's batcher); one it refuses for its data is left.
  await Promise.all(orphans.map((endpointId) => order.end({ merchantId: intake.merchantId, endpointId, webhookId: intake.webhookId }))).catch((err: unknown) => {
    logger.warn('places in order of a redelivered webhook not ended: PostgreSQL refused it', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error)?.message });
  });
  return true;
}
