import { z } from 'zod';
import { InvalidSettingsError } from './errors.js';

/**
 * zod's messages name types ("expected string, received undefined"); these say what the field
 * needs in the words of the admin API's documentation.
 */
export const expecting =
  (what: string, allowed?: readonly string[]) =>
  (issue: { code?: string; input?: unknown; keys?: string[] }): string => {
    if (issue.code === 'unrecognized_keys') return `unknown field ${issue.keys?.join(', ')}; allowed: ${allowed?.join(', ')}`;
    return issue.input === undefined ? 'is required' : `must be ${what}`;
  };

const publicKeyField = z
  .string({ error: expecting('a string') })
  .min(8, 'must be at least 8 characters')
  .max(512, 'must be at most 512 characters');
/** The longest webhook URL the admin API, the CLI and the portal take. */
export const WEBHOOK_URL_MAX_LENGTH = 2048;
export const urlField = z.string({ error: expecting('a string') }).min(1, 'is required').max(WEBHOOK_URL_MAX_LENGTH, `must be at most ${WEBHOOK_URL_MAX_LENGTH} characters`);
export const enabledField = z.boolean({ error: 'must be true or false' });
/**
 * Order per reference (off by default): the webhook's next event of a tnxRef / payout reference is
 * not sent while an earlier one of it is not yet delivered, failed or skipped (libs/ordering).
 */
export const orderByReferenceField = z.boolean({ error: 'must be true or false' });

/**
 * What the dashboard's backend (or an operator) sends of a merchant: its settings of its own.
 * Strict: its endpoints are written through their own routes, and a field of an older shape
 * (the single `webhook`) is refused, named.
 */
export const merchantInputSchema = z.strictObject(
  { publicKey: publicKeyField },
  { error: expecting('a JSON object', ['publicKey']) },
);

export type MerchantInput = z.infer<typeof merchantInputSchema>;

/** PATCH: only the fields named change (JSON merge patch, RFC 7396). */
export const merchantPatchSchema = z.strictObject(
  { publicKey: publicKeyField.optional() },
  { error: expecting('a JSON object', ['publicKey']) },
);

export type MerchantPatch = z.infer<typeof merchantPatchSchema>;

/** How long, in seconds, a replaced webhook secret keeps signing: by default, and at most. */
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

/** The first problem of a zod parse as field and message, for a 400 or a CLI error naming the field. */
export function firstIssue(error: z.ZodError): InvalidSettingsError {
  const issue = error.issues[0]!;
  // An array element's problem is the array's: "events: each event must be one of …".
  const path = issue.path.filter((part) => typeof part !== 'number');
  return new InvalidSettingsError(path.join('.') || 'body', issue.message);
}
