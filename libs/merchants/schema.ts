import { z } from 'zod';
import { EVENT_NAMES } from '../contracts/events.js';

export const WEBHOOK_SECRET = /^whsec_[A-Za-z0-9+/]{16,}={0,2}$/;

const secret = z.string().regex(WEBHOOK_SECRET, 'webhook.secret must be whsec_ followed by base64');

/** Each adds a signature to every webhook. */
export const MAX_GRACE_SECRETS = 3;

const graceSecret = z.object({ secret, expiresAt: z.iso.datetime({ offset: true }) });
export type GraceSecret = z.infer<typeof graceSecret>;

export const DISABLED_REASONS = ['failing', 'manual'] as const;
export type DisabledReason = (typeof DISABLED_REASONS)[number];

/** Above it, leave the throttle unset. */
export const MAX_PER_SECOND_LIMIT = 10_000;

export const maxPerSecondField = z
  .number({ error: 'must be a whole number of webhooks per second' })
  .int('must be a whole number of webhooks per second')
  .min(1, 'must be at least 1')
  .max(MAX_PER_SECOND_LIMIT, `must be at most ${MAX_PER_SECOND_LIMIT} (leave it out for no limit)`);

export const webhookEventsSchema = z
  .array(z.enum(EVENT_NAMES, { error: `each event must be one of ${EVENT_NAMES.join(', ')}` }))
  .min(1, 'events must name at least one event (leave it out for all of them)')
  .refine((events) => new Set(events).size === events.length, 'events must not repeat an event');

/** The row's hard cap; the variable of this name (1 to this) is what writes allow. */
export const MAX_ENDPOINTS_PER_MERCHANT = 20;

export const ENDPOINT_ID = /^ep_[A-Za-z0-9_-]{4,64}$/;

const endpointSchema = z.object({
  id: z.string().regex(ENDPOINT_ID, 'endpoint id must be ep_ followed by 4 to 64 letters, digits, _ or -'),
  url: z.url({ protocol: /^https?$/, error: 'webhook.url must be an http(s) URL' }),
  description: z.string().max(500).optional(),
  enabled: z.boolean(),
  secret,
  events: webhookEventsSchema.optional(),
  /** Across every dispatcher; absent, no limit. */
  maxPerSecond: maxPerSecondField.optional(),
  /** Newest first, each signing until its own expiry. */
  previousSecrets: z.array(graceSecret).max(MAX_GRACE_SECRETS, `at most ${MAX_GRACE_SECRETS} previous secrets`).optional(),
  /** Absent while enabled. */
  disabledReason: z.enum(DISABLED_REASONS).optional(),
  disabledAt: z.iso.datetime({ offset: true }).optional(),
  /** The operator when absent; the portal may undo only the merchant's own. */
  disabledBy: z.enum(['operator', 'merchant']).optional(),
  /** The auto-disable clock (endpoint_health, never the row). */
  failingSince: z.iso.datetime({ offset: true }).optional(),
  /** A clock without a failure for two tenths of ENDPOINT_DISABLE_AFTER is stale. */
  lastFailureAt: z.iso.datetime({ offset: true }).optional(),
  /** A webhook waits while an earlier one of its reference is not yet ended (libs/ordering). */
  orderByReference: z.boolean().optional(),
  /** Absent for secrets issued before it was recorded. */
  secretIssuedAt: z.iso.datetime({ offset: true }).optional(),
});

// Strict: a merchant in an older shape (its one `webhook`) is refused, not taken with no endpoint.
const merchantSchema = z
  .strictObject({
    id: z.string().min(1).max(200),
    publicKey: z.string().min(8, 'publicKey must be at least 8 characters'),
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

function flagRepeats<T, K extends keyof T & string>(ctx: z.RefinementCtx, list: string, items: readonly T[], field: K, message: (item: T) => string): void {
  const seen = new Set<T[K]>();
  items.forEach((item, i) => {
    if (seen.has(item[field])) ctx.addIssue({ code: 'custom', path: [list, i, field], message: message(item) });
    seen.add(item[field]);
  });
}

export type Merchant = z.output<typeof merchantSchema>;
export type Endpoint = z.infer<typeof endpointSchema>;

/** Who turned it off by hand (one written before disabledBy was: the operator); null while on, or off for failing. */
export function disabledByOf(webhook: Endpoint): 'operator' | 'merchant' | null {
  return !webhook.enabled && webhook.disabledReason === 'manual' ? (webhook.disabledBy ?? 'operator') : null;
}

/** Only the operator turns it on again. */
export function disabledByOperator(webhook: Endpoint | undefined): boolean {
  return !!webhook && disabledByOf(webhook) === 'operator';
}
