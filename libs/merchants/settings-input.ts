import { z } from 'zod';
import { InvalidSettingsError } from './errors.js';
import { ENDPOINT_ID, maxPerSecondField, webhookEventsSchema } from './schema.js';

/** zod's messages name types; these say what the field needs, as the admin API's documentation does. */
const expecting =
  (what: string, allowed?: readonly string[]) =>
  (issue: { code?: string; input?: unknown; keys?: string[] }): string => {
    if (issue.code === 'unrecognized_keys') return `unknown field ${issue.keys?.join(', ')}; allowed: ${allowed?.join(', ')}`;
    return issue.input === undefined ? 'is required' : `must be ${what}`;
  };

const publicKeyField = z
  .string({ error: expecting('a string') })
  .min(8, 'must be at least 8 characters')
  .max(512, 'must be at most 512 characters');
export const WEBHOOK_URL_MAX_LENGTH = 2048;
const urlField = z.string({ error: expecting('a string') }).min(1, 'is required').max(WEBHOOK_URL_MAX_LENGTH, `must be at most ${WEBHOOK_URL_MAX_LENGTH} characters`);
const booleanField = z.boolean({ error: 'must be true or false' });
const descriptionField = z.string({ error: expecting('a string') }).max(500, 'must be at most 500 characters');

/** Strict: its endpoints are written through their own routes. */
export const merchantInputSchema = z.strictObject(
  { publicKey: publicKeyField },
  { error: expecting('a JSON object', ['publicKey']) },
);

export type MerchantInput = z.infer<typeof merchantInputSchema>;

export const merchantPatchSchema = merchantInputSchema.partial();

export type MerchantPatch = z.infer<typeof merchantPatchSchema>;

/** The secret is the service's: rotate it. */
const ENDPOINT_FIELDS = ['url', 'description', 'enabled', 'events', 'maxPerSecond', 'orderByReference'] as const;

export const endpointInputSchema = z.strictObject(
  {
    url: urlField,
    description: descriptionField.optional(),
    enabled: booleanField.default(true),
    events: webhookEventsSchema.optional(),
    maxPerSecond: maxPerSecondField.optional(),
    orderByReference: booleanField.optional(),
  },
  { error: expecting('a JSON object with url, and optionally description, enabled, events, maxPerSecond and orderByReference', ENDPOINT_FIELDS) },
);
export type EndpointInput = z.infer<typeof endpointInputSchema>;

/** JSON merge patch: null goes back to none. */
export const endpointPatchSchema = z.strictObject(
  {
    url: urlField.optional(),
    description: descriptionField.nullable().optional(),
    enabled: booleanField.optional(),
    events: webhookEventsSchema.nullable().optional(),
    maxPerSecond: maxPerSecondField.nullable().optional(),
    orderByReference: booleanField.optional(),
  },
  { error: expecting('a JSON object with url, description, enabled, events, maxPerSecond or orderByReference', ENDPOINT_FIELDS) },
);
export type EndpointPatch = z.infer<typeof endpointPatchSchema>;

export const endpointIdSchema = z.string().regex(ENDPOINT_ID, 'must be an endpoint id (ep_…)');

/** How long a replaced webhook secret keeps signing: by default, and at most. */
export const GRACE_SECONDS = { default: 86_400, max: 30 * 86_400 };

export const rotateInputSchema = z.strictObject(
  {
    graceSeconds: z
      .number({ error: 'must be a number of seconds' })
      .int('must be a whole number of seconds')
      .min(0, 'must be 0 or more')
      .max(GRACE_SECONDS.max, 'must be at most 2592000 (30 days)')
      .default(GRACE_SECONDS.default),
  },
  { error: expecting('a JSON object', ['graceSeconds']) },
);

/** The first problem of a zod parse, naming its field. */
export function firstIssue(error: z.ZodError): InvalidSettingsError {
  const issue = error.issues[0]!;
  // An array element's problem is the array's: "events: each event must be one of …".
  const path = issue.path.filter((part) => typeof part !== 'number');
  return new InvalidSettingsError(path.join('.') || 'body', issue.message);
}
