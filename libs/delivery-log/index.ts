/**
 * The delivery log's stream side: what the dispatcher writes (DeliveryRecorder: record() after a
 * delivery's outcome and its effect are confirmed, before its ack) and the recorder reads.
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
export { decodeRecords, type RefusedEntry } from './decode.js';
export { DeliveryRecorder, MAX_RECORDED_BODY_BYTES, RecordNotConfirmedError, RecorderStoppedError } from './writer.js';
