/** The delivery log's stream side: what the dispatcher writes (DeliveryRecorder) and the recorder reads. */
export { type Attempt, type DeliveryRecord, type DeliveryRecordInput, deliveryRecordSchema } from './record.js';
export { OUTCOMES, type Outcome, statusOf, WEBHOOK_STATUSES, type WebhookStatus } from './record.js';
export { decodeRecords, type RefusedEntry } from './record-check.js';
export { DeliveryRecorder, MAX_RECORDED_BODY_BYTES, RecordNotConfirmedError, RecorderStoppedError } from './writer.js';
