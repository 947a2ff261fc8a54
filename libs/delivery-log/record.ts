import { z } from 'zod';

/** What happened to one delivery of a webhook; `retrying`, `deferred` and `postponed` leave it pending. */
export const OUTCOMES = ['delivered', 'retrying', 'failed', 'skipped', 'deferred', 'postponed', 'invalid'] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** The status a webhook shows in the log: its latest record's outcome, folded to what merchants filter by. */
export const WEBHOOK_STATUSES = ['delivered', 'retrying', 'failed', 'skipped'] as const;
export type WebhookStatus = (typeof WEBHOOK_STATUSES)[number];

const STATUS_OF: Record<Outcome, WebhookStatus> = {
  delivered: 'delivered',
  retrying: 'retrying',
  failed: 'failed',
  skipped: 'skipped',
  deferred: 'retrying',
  postponed: 'retrying',
  // A message parked in invalid will not be delivered without an operator: failed, for merchants.
  invalid: 'failed',
};

export const statusOf = (outcome: Outcome): WebhookStatus => STATUS_OF[outcome];

const iso = z.iso.datetime({ offset: true });

/** An HTTP request made (or tried: a timeout, a refused connection). */
const attemptSchema = z.object({
  startedAt: iso,
  durationMs: z.number().int().min(0),
  httpStatus: z.number().int().min(100).max(599).optional(),
  /** ATTEMPT_ERROR_CLASSES (http_<status>, timeout, ...): merchants read it, so never the detail. */
  error: z.string().max(1000).optional(),
  /** The first DELIVERY_LOG_RESPONSE_BYTES bytes of the response body, as UTF-8 text. */
  responseBody: z.string().optional(),
});
export type Attempt = z.infer<typeof attemptSchema>;

/**
 * What happened to one delivery of a webhook, one per delivery the dispatcher settles. `payload`
 * travels on every record, so that a record stands alone; it is the body's text, never a parsed
 * value: the log keeps the bytes sent, and a resend from it sends them.
 */
export const deliveryRecordSchema = z.object({
  /** A record published twice (an unconfirmed flush sent again) is stored once. */
  id: z.uuid(),
  /** The recorder partitions attempts by its day. */
  at: iso,
  webhookId: z.string().min(1).max(200),
  merchantId: z.string().min(1).max(200),
  /** Absent on records written before endpoints. */
  endpointId: z.string().min(1).max(200).optional(),
  event: z.string().min(1).max(100),
  references: z.array(z.string().min(1).max(200)).max(4),
  payload: z.string().optional(),
  /** x-first-seen-at: an ordered webhook's changes after its wait; the log keeps the first record's. */
  firstSeenAt: iso,
  outcome: z.enum(OUTCOMES),
  /** 1 for the first POST; attempts so far when none was made. A resend counts from 1 again. */
  attemptNumber: z.number().int().min(0),
  /** 0 for the webhook's own attempts, n for its n-th resend's: with the attempt number it orders the records. */
  resend: z.number().int().min(0).optional(),
  attempt: attemptSchema.optional(),
  nextAttemptAt: iso.optional(),
  /** `failed`: a FAILED_REASONS value; `skipped`: why (webhook-disabled, not-subscribed, ...); `invalid`: its code. */
  reason: z.string().max(200).optional(),
});
export type DeliveryRecord = z.infer<typeof deliveryRecordSchema>;
/** The id and time are filled in when absent. */
export type DeliveryRecordInput = Omit<DeliveryRecord, 'id' | 'at'> & { id?: string; at?: string };
