import { z } from 'zod';
import { EVENT_NAMES, isWellFormedReference } from '../../libs/contracts/index.js';
import { isStorableFeedCursor, isStorableText, isStorableTime } from '../../libs/delivery-store/index.js';
import { OUTCOMES, WEBHOOK_STATUSES } from '../../libs/delivery-log/index.js';
import { ATTEMPT_ERROR_CLASSES } from '../../libs/http/index.js';
import { merchantIdParams, type RouteDeclaration } from './route-declaration.js';
import { envelope } from './schemas.js';

/** Webhooks per page of the log's list, and events per page of the feed: by default, and at most. */
export const LOG_PAGE_LIMIT = { default: 50, max: 100 };
export const FEED_PAGE_LIMIT = { default: 100, max: 500 };

// Checked against what PostgreSQL holds too, so that a time it would refuse answers 400, not 503.
const time = z.iso.datetime({ offset: true }).refine(isStorableTime, 'must be a time in the years 0001 to 9999');
const when = z.string().nullable();

/** A webhook id, or an endpoint id as a filter: any id the log or the index may hold (an endpoint deleted since too). */
const storedId = z.string().min(1).max(200).refine(isStorableText, 'must not hold a NUL character');
const endpointOfDelivery = z.string().nullable().describe(
  "The endpoint (ep_…) of this delivery; null on deliveries recorded before endpoints (the merchant's only endpoint then), and on a webhook skipped because none of the merchant's endpoints took it",
);
const ERROR_CLASSES = ATTEMPT_ERROR_CLASSES.join(', ');

export const listQuery = z.strictObject({
  reference: z.string().min(1).max(200).refine(isWellFormedReference, 'must be 1 to 200 characters without control characters or a lone surrogate').optional().describe('Only webhooks carrying this reference (a refund: its refundRef or tnxRef)'),
  event: z.enum(EVENT_NAMES).optional(),
  status: z.enum(WEBHOOK_STATUSES).optional().describe('The delivery\'s status: its latest record\'s outcome'),
  endpointId: storedId.optional().describe('Only deliveries to this endpoint (ep_…)'),
  since: time.optional().describe('First seen at or after this time (ISO 8601)'),
  until: time.optional().describe('First seen before this time (ISO 8601)'),
  limit: z.coerce.number().int().min(1).max(LOG_PAGE_LIMIT.max).default(LOG_PAGE_LIMIT.default),
  cursor: z.string().max(500).optional().describe('nextCursor of the previous page'),
});

const feedQuery = z.strictObject({
  after: z.string().regex(/^\d{1,19}$/)
    .refine(isStorableFeedCursor, 'must be a cursor this service gave (digits, at most 9223372036854775807)')
    .optional()
    .describe("The cursor of the last event already seen (the previous page's nextCursor); absent: from the oldest event kept"),
  limit: z.coerce.number().int().min(1).max(FEED_PAGE_LIMIT.max).default(FEED_PAGE_LIMIT.default).describe('At most this many events; a page also stops once its payloads pass 4 MB (always at least one event)'),
});

export const webhookIdParams = z.strictObject({ webhookId: storedId });

/** What happened to one delivery of a webhook: the webhook on one endpoint. */
const deliverySummary = z.strictObject({
  endpointId: endpointOfDelivery,
  status: z.enum(WEBHOOK_STATUSES),
  attempts: z.number().int().min(0).describe('HTTP attempts made so far'),
  firstAttemptAt: when,
  lastAttemptAt: when,
  lastHttpStatus: z.number().int().nullable(),
  lastError: z.string().nullable().describe(`The latest record's error class (${ERROR_CLASSES}) or reason`),
  nextAttemptAt: when.describe('When retrying: when the next attempt is due'),
});

/** What names a webhook, in a list's item and in a feed's entry. */
const webhookFacts = { webhookId: z.string(), event: z.string(), references: z.array(z.string()), firstSeenAt: z.string() };

/** A list's item: one delivery (a webhook sent to several endpoints is one item per endpoint). */
export const webhookSummary = deliverySummary.extend(webhookFacts);

const deliveryRecordView = z.strictObject({
  endpointId: z.string().nullable().describe('The endpoint this record was for; null before endpoints'),
  at: z.string(),
  outcome: z.enum(OUTCOMES),
  attemptNumber: z.number().int(),
  startedAt: when.describe('null: no attempt was made (see reason)'),
  durationMs: z.number().int().nullable(),
  httpStatus: z.number().int().nullable(),
  error: z.string().nullable().describe(`Why the attempt failed, as a class: ${ERROR_CLASSES}; never an address or a system message`),
  responseBody: z.string().nullable().describe('The first DELIVERY_LOG_RESPONSE_BYTES bytes of the answer, when the endpoint answered (never for blocked_address)'),
  reason: z.string().nullable().describe('Why no attempt was made (circuit-open, deferred, webhook-disabled, ...) or why it failed'),
  nextAttemptAt: when,
});

export const webhookDetail = webhookSummary.extend({
  endpointId: endpointOfDelivery.describe('The endpoint when the webhook had one delivery; null when it had several (see deliveries)'),
  status: z.enum(WEBHOOK_STATUSES).describe('With several deliveries: retrying while one is, else failed if one failed, else delivered if one was, else skipped'),
  attempts: z.number().int().min(0).describe('HTTP attempts made so far, on every endpoint'),
  payload: z.unknown().describe('The body sent: {"event": ..., "data": ...}'),
  deliveries: z.array(deliverySummary).describe("Each endpoint's delivery of the webhook, with its own status and attempts"),
  records: z.array(deliveryRecordView).describe("Every record of every delivery, each delivery's in its own order (resend, attempt, then the order recorded; never the hosts' clocks), one delivery after another as in deliveries: each attempt, and each time none was made; each names its endpoint"),
  duplicates: z.number().int().min(0).describe('Repeats of this event that upstream published within INTAKE_DEDUPE_WINDOW (its messageId, else the same body), acked and not delivered; counted while its key is kept (the window, and up to a day and an hour more)'),
  lastDuplicateAt: when.describe('When the last of those repeats arrived'),
});

const feedEvent = z.strictObject({
  cursor: z.string().describe('Pass as after= to continue past this event'),
  ...webhookFacts,
  status: z.enum(WEBHOOK_STATUSES).describe('Over its deliveries: retrying while one is, else failed if one failed, else delivered if one was, else skipped'),
  payload: z.unknown(),
});

const LOG_ERRORS = {
  '400':
    'invalid_parameter: a parameter is malformed or outside what the log holds (a time outside the years 0001 to 9999, a ' +
    'feed cursor past 9223372036854775807, a cursor this service did not give; the message names it); unknown_parameter',
  '401': 'missing_credentials, invalid_credentials, token_expired',
  '403': 'merchant_mismatch (merchant routes); insufficient_scope (admin routes)',
  '429':
    'rate_limited: more reads of this merchant\'s log per minute than LOG_RATE_LIMIT allows; too_many_concurrent_queries: ' +
    'this merchant already has 2 reads in flight and 8 waiting (or one waited 2 s). Retry after Retry-After',
  '503':
    'log_unavailable: PostgreSQL is unreachable, or the query ran past 2 s (narrow it: since and until, a lower limit); ' +
    'retry after Retry-After. log_disabled: DELIVERY_LOG=off here. auth_unavailable',
};
const NOT_FOUND = { '404': 'webhook_not_found: no such webhook for this merchant (or not recorded yet: the log may be behind)' };

export const webhookPage = envelope(z.strictObject({ webhooks: z.array(webhookSummary), nextCursor: z.string().nullable() }));
const feed = envelope(
  z.strictObject({
    events: z.array(feedEvent),
    nextCursor: z.string().describe('Pass as after= for the next page; the same cursor again when there was nothing new'),
  }),
);

const LIST_TEXT =
  'One item per delivery: a webhook sent to several of the merchant\'s endpoints is one item per endpoint (endpointId; ' +
  'filter endpointId=). Newest first. Status is the delivery\'s latest record\'s outcome: delivered, retrying (also while postponed or deferred), failed ' +
  '(attempts exhausted, circuit open past the schedule, disabled since, or parked invalid) or skipped (not sent: webhook ' +
  'disabled or not subscribed to the event). The log is written from a stream and may be a few seconds behind.';
const FEED_TEXT =
  'One entry per event, however many endpoints it went to. Every event for the merchant in one stable order (the order the log recorded them), with its payload and the ' +
  'webhook-id it was, or would have been, sent with: skipped events are here too. Store nextCursor; calling again with ' +
  'after=<nextCursor> returns only what came after, so a merchant catching up after an outage misses nothing. A page ' +
  'holds at most 4 MB of payloads whatever the limit (always at least one event): fewer events than the limit do not ' +
  'mean the end; an empty page does.';

const MERCHANT_LOG_ROUTES = [
  {
    operationId: 'listWebhooks', method: 'get', path: '/nucleus/webhooks',
    summary: "The merchant's webhooks and what happened to each",
    description: LIST_TEXT,
    input: { query: listQuery },
    output: { '200': { description: 'A page of webhooks', schema: webhookPage } },
    errors: LOG_ERRORS,
  },
  {
    operationId: 'getWebhook', method: 'get', path: '/nucleus/webhooks/{webhookId}',
    summary: "One webhook with its payload, each endpoint's delivery and every attempt",
    input: { params: webhookIdParams },
    output: { '200': { description: 'The webhook', schema: envelope(webhookDetail) } },
    errors: { ...LOG_ERRORS, ...NOT_FOUND },
  },
  {
    operationId: 'listEvents', method: 'get', path: '/nucleus/events',
    summary: 'The feed: every event for the merchant, to reconcile',
    description: FEED_TEXT,
    input: { query: feedQuery },
    output: { '200': { description: 'A page of the feed', schema: feed } },
    errors: LOG_ERRORS,
  },
] as const satisfies readonly RouteDeclaration[];

/** The same read of any merchant, for operators: under /admin/merchants/{merchantId}, with the admin token. */
function forOperators<const Id extends string>(route: (typeof MERCHANT_LOG_ROUTES)[number], operationId: Id, summary: string) {
  const params = 'params' in route.input ? route.input.params.shape : {};
  return {
    ...route,
    operationId,
    path: `/admin/merchants/{merchantId}${route.path.slice('/nucleus'.length)}`,
    summary,
    input: { ...route.input, params: merchantIdParams.extend(params) },
    errors: { ...route.errors, '400': `invalid_merchant_id; ${route.errors['400']}` },
  } satisfies RouteDeclaration;
}

export const LOG_ROUTES = [
  ...MERCHANT_LOG_ROUTES,
  forOperators(MERCHANT_LOG_ROUTES[0], 'adminListWebhooks', "Any merchant's webhooks (operators)"),
  forOperators(MERCHANT_LOG_ROUTES[1], 'adminGetWebhook', "Any merchant's webhook with every attempt (operators)"),
  forOperators(MERCHANT_LOG_ROUTES[2], 'adminListEvents', "Any merchant's feed (operators)"),
] as const;
