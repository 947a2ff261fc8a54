/**
 * The delivery log's stream side: what the dispatcher writes and the recorder reads.
 *
 * The dispatcher's whole interface is DeliveryRecorder:
 *   const log = new DeliveryRecorder(broker, logger, { prefix, replication });
 *   await log.start();                 // declares <prefix>.deliveries (and again on reconnect)
 *   await log.record({ ... });         // after the outcome is decided and its effect (move,
 *                                      // failed append) is confirmed, before delivery.ack()
 *   await log.stop();                  // after the consumer is cancelled, before broker.close()
 * record() resolves when the stream message holding the record is confirmed; it rejects with
 * RecordNotConfirmedError when it was not, and the delivery must then stay unacked. Records are
 * batched (200 per message, or 5 ms after the first), so awaiting each costs a few ms of latency,
 * not a publish per delivery.
 */
export {
  type Attempt,
  type DeliveryRecord,
  type DeliveryRecordInput,
  OUTCOMES,
  type Outcome,
  WEBHOOK_STATUSES,
  type WebhookStatus,
  deliveryRecordSchema,
  statusOf,
} from './record.js';
export { decodeRecords } from './decode.js';
export { DeliveryRecorder, RecordNotConfirmedError, RecorderStoppedError } from './writer.js';
