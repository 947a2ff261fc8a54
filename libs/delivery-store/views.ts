import type { Outcome, WebhookStatus } from '../delivery-log/index.js';

/** One delivery of a webhook: the webhook on one of the merchant's endpoints, and what happened to it. */
export interface DeliverySummary {
  /** Null on deliveries recorded before endpoints, and on a webhook none of its endpoints took (skipped). */
  endpointId: string | null;
  status: WebhookStatus;
  attempts: number;
  firstAttemptAt: string | null;
  lastAttemptAt: string | null;
  lastHttpStatus: number | null;
  lastError: string | null;
  nextAttemptAt: string | null;
}

/** A list's item: one delivery (the webhook on one endpoint); a webhook's detail folds its deliveries. */
export interface WebhookSummary extends DeliverySummary {
  webhookId: string;
  event: string;
  references: string[];
  firstSeenAt: string;
}

export interface RecordView {
  /** Null before endpoints. */
  endpointId: string | null;
  at: string;
  outcome: Outcome;
  attemptNumber: number;
  startedAt: string | null;
  durationMs: number | null;
  httpStatus: number | null;
  error: string | null;
  responseBody: string | null;
  reason: string | null;
  nextAttemptAt: string | null;
}

export interface WebhookDetail extends WebhookSummary {
  payload: unknown;
  deliveries: DeliverySummary[];
  records: RecordView[];
  /** Repeats of its intake key acked without delivery (INTAKE_DEDUPE_WINDOW), while the key is kept; and the last one's time. */
  duplicates: number;
  lastDuplicateAt: string | null;
}

export interface FeedEvent extends Pick<WebhookSummary, 'webhookId' | 'event' | 'references' | 'firstSeenAt' | 'status'> {
  cursor: string;
  payload: unknown;
}

export interface WebhookFilters {
  reference?: string;
  endpointId?: string;
  event?: string;
  status?: string;
  since?: string;
  until?: string;
  cursor?: string;
  limit: number;
}
