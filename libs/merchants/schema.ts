import { z } from 'zod';
import { EVENT_NAMES } from '../contracts/events.js';

export const WEBHOOK_SECRET = /^whsec_[A-Za-z0-9+/]{16,}={0,2}$/;

const secret = z.string().regex(WEBHOOK_SECRET, 'webhook.secret must be whsec_ followed by base64');

/**
 * Old secrets that still sign during their grace, at most: each adds a signature to every webhook,
 * and a merchant switching its verification needs one or two, not a history.
 */
export const MAX_GRACE_SECRETS = 3;

const graceSecret = z.object({ secret, expiresAt: z.iso.datetime({ offset: true }) });
export type GraceSecret = z.infer<typeof graceSecret>;

/** Why a webhook was turned off: by the service after failing too long, or by an operator. */
export const DISABLED_REASONS = ['failing', 'manual'] as const;
export type DisabledReason = (typeof DISABLED_REASONS)[number];

/** The highest throttle one can set (webhooks a second to an endpoint); above it, leave the throttle unset. */
export const MAX_PER_SECOND_LIMIT = 10_000;

export const maxPerSecondField = z
  .number({ error: 'must be a whole number of webhooks per second' })
  .int('must be a whole number of webhooks per second')
  .min(1, 'must be at least 1')
  .max(MAX_PER_SECOND_LIMIT, `must be at most ${MAX_PER_SECOND_LIMIT} (leave it out for no limit)`);

/** Which events a webhook receives; absent means all of them. */
export const webhookEventsSchema = z
  .array(z.enum(EVENT_NAMES, { error: `each event must be one of ${EVENT_NAMES.join(', ')}` }))
  .min(1, 'events must name at least one event (leave it out for all of them)')
  .refine((events) => new Set(events).size === events.length, 'events must not repeat an event');

/**
 * The most endpoints one merchant may have (issue 56): each adds a delivery per event. The row's
 * hard cap; MAX_ENDPOINTS_PER_MERCHANT (the variable, 1 to this) is what writes allow.
 */
export const MAX_ENDPOINTS_PER_MERCHANT = 20;

/** An endpoint's id: `ep_` and what newEndpointId() makes (or a file names). */
export const ENDPOINT_ID = /^ep_[A-Za-z0-9_-]{4,64}$/;

/**
 * One of a merchant's endpoints: where its webhooks go, which of them, signed with which secret,
 * and whether it is on. Each has its own circuit, in-flight bound, throttle and failing clock.
 */
export const endpointSchema = z.object({
  id: z.string().regex(ENDPOINT_ID, 'endpoint id must be ep_ followed by 4 to 64 letters, digits, _ or -'),
  url: z.url({ protocol: /^https?$/, error: 'webhook.url must be an http(s) URL' }),
  /** What the merchant calls it (the portal shows it); absent when not given. */
  description: z.string().max(500).optional(),
  enabled: z.boolean(),
  secret,
  events: webhookEventsSchema.optional(),
  /** At most this many webhooks a second to the endpoint, whatever the number of dispatchers; absent, no limit. */
  maxPerSecond: maxPerSecondField.optional(),
  /** Every secret replaced within its grace, newest first, each signing until its own expiry. */
  previousSecrets: z.array(graceSecret).max(MAX_GRACE_SECRETS, `at most ${MAX_GRACE_SECRETS} previous secrets`).optional(),
  /**
   * Why the endpoint is off, when the service or an operator turned it off: `failing` (auto-disable,
   * ENDPOINT_DISABLE_AFTER) or `manual` (admin API, CLI); and since when. Absent while enabled.
   */
  disabledReason: z.enum(DISABLED_REASONS).optional(),
  disabledAt: z.iso.datetime({ offset: true }).optional(),
  /**
   * Who turned a `manual` disable on: the platform's operator (admin API, CLI; the default) or
   * the merchant itself (the portal). The portal may undo only the merchant's own.
   */
  disabledBy: z.enum(['operator', 'merchant']).optional(),
  /**
   * The endpoint's first failure after its last success, once a dispatcher has seen it fail for a
   * tenth of ENDPOINT_DISABLE_AFTER without a success (cleared by the next success anywhere):
   * the auto-disable clock, shared by every dispatcher and kept across restarts.
   */
  failingSince: z.iso.datetime({ offset: true }).optional(),
  /**
   * The latest failure the dispatchers recorded for that clock (refreshed at most every tenth
   * of ENDPOINT_DISABLE_AFTER): a clock without a failure for two tenths is stale, not running.
   */
  lastFailureAt: z.iso.datetime({ offset: true }).optional(),
  /**
   * Order per reference (off when absent): a webhook is not sent while an earlier one of its
   * tnxRef / payout reference is not yet delivered, failed or skipped (libs/ordering).
   */
  orderByReference: z.boolean().optional(),
  /** When `secret` was issued (the portal shows its age); absent for secrets issued before it was recorded. */
  secretIssuedAt: z.iso.datetime({ offset: true }).optional(),
});

// Strict: a file in an older shape (its merchant's one `webhook`) is refused at start-up, naming
// the key, instead of loading merchants with no endpoint that skip every webhook.
export const merchantSchema = z
  .strictObject({
    id: z.string().min(1).max(200),
    publicKey: z.string().min(8, 'publicKey must be at least 8 characters'),
    /**
     * Where its webhooks go: each enabled endpoint whose filter takes an event gets its own
     * delivery of it (the dispatcher fans it out), at most MAX_ENDPOINTS_PER_MERCHANT.
     */
    endpoints: z.array(endpointSchema).max(MAX_ENDPOINTS_PER_MERCHANT, `at most ${MAX_ENDPOINTS_PER_MERCHANT} endpoints`).default([]),
  })
  .superRefine((merchant, ctx) => {
    flagRepeats(ctx, 'endpoints', merchant.endpoints, 'id', (e) => `duplicate endpoint id ${e.id}`);
    flagRepeats(ctx, 'endpoints', merchant.endpoints, 'url', () => 'duplicate endpoint url');
  });

export const merchantsFileSchema = z
  .object({ merchants: z.array(merchantSchema) })
  .superRefine((file, ctx) => {
    flagRepeats(ctx, 'merchants', file.merchants, 'id', (m) => `duplicate merchant id ${m.id}`);
    flagRepeats(ctx, 'merchants', file.merchants, 'publicKey', () => 'duplicate publicKey');
  });

/** An issue at each item whose `field` an earlier item of the list already has. */
function flagRepeats<T, K extends keyof T & string>(ctx: z.RefinementCtx, list: string, items: readonly T[], field: K, message: (item: T) => string): void {
  const seen = new Set<T[K]>();
  items.forEach((item, i) => {
    if (seen.has(item[field])) ctx.addIssue({ code: 'custom', path: [list, i, field], message: message(item) });
    seen.add(item[field]);
  });
}

export type Merchant = z.output<typeof merchantSchema>;
export type Endpoint = z.infer<typeof endpointSchema>;
export type MerchantsFile = z.infer<typeof merchantsFileSchema>;
