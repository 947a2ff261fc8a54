import { z } from 'zod';
import { EVENT_NAMES } from '../../libs/contracts/index.js';
import { ERROR_CODES } from './errors.js';

/** A success in the envelope: `data` holds what the operation returns. */
export const envelope = <T extends z.ZodType>(data: T, message: z.ZodString = z.string()) =>
  z.strictObject({ message, error: z.null(), data });

export const errorEnvelope = z.strictObject({
  message: z.string(),
  error: z.strictObject({ code: z.enum(ERROR_CODES), status: z.number().int() }),
  data: z.null(),
});

/** What the admin API shows of an endpoint (the portal too, but the last previous secret's expiry). */
export const endpointShown = {
  id: z.string().describe('The endpoint id, ep_…'),
  description: z.string().nullable().describe('What the merchant calls it; null when not given'),
  url: z.string(),
  enabled: z.boolean(),
  events: z.array(z.enum(EVENT_NAMES)),
  previousSecretExpiresAt: z.string().nullable().describe('ISO 8601 time the last previous secret stops signing; null when none is in its grace period'),
  previousSecrets: z.array(z.strictObject({ expiresAt: z.string() })).max(3).describe('Each previous secret still signing, the latest expiry first (never the secret itself)'),
  disabledReason: z.enum(['failing', 'manual']).nullable().describe('Why the endpoint is off: failing (disabled automatically after ENDPOINT_DISABLE_AFTER of failed attempts) or manual; null while enabled'),
  disabledAt: z.string().nullable().describe('ISO 8601 time the endpoint was turned off; null while enabled'),
  failingSince: z.string().nullable().describe("ISO 8601 time of the endpoint's first failure after its last success, once it has failed for a tenth of ENDPOINT_DISABLE_AFTER (the auto-disable clock); null otherwise"),
  orderByReference: z.boolean().describe('Order per reference (off by default): a webhook is not sent while an earlier one of its tnxRef (charge, refund) or payout reference is not yet delivered, failed or skipped; only that reference waits'),
  maxPerSecond: z.number().int().nullable().describe('The throttle: at most this many webhooks a second to the endpoint, whatever the number of dispatchers (a 10 % margin for the network aside); null: no limit'),
  currentPerSecond: z.number().nullable().describe('Read-only: the rate the endpoint is sent at now. Lower than maxPerSecond while its 429 or 503 answers slow it (halved at most once a second, raised a tenth a second as it succeeds); null: no limit'),
};

/** One of a merchant's endpoints (`/admin/merchants/{id}/endpoints`); its secret only in the answer that created it. */
export const endpointView = z.strictObject({
  ...endpointShown,
  secret: z.string().regex(/^whsec_/).optional().describe('Only in the answer that created the endpoint'),
});

/** A merchant: its own settings, and its endpoints as the endpoint routes show them (read-only here: written through those routes). */
export const merchantView = z.strictObject({
  id: z.string(),
  publicKey: z.string(),
  endpoints: z.array(z.strictObject(endpointShown)).describe('Read-only: each endpoint as GET /admin/merchants/{merchantId}/endpoints/{endpointId} shows it; add, change, delete and rotate them through those routes'),
});

export const rotated = z.strictObject({
  secret: z.string().regex(/^whsec_/),
  previousSecretExpiresAt: z.string().nullable().describe('ISO 8601 time the replaced secret stops signing; null with graceSeconds 0'),
});

export const readiness = z.looseObject({
  status: z.enum(['ready', 'not ready']),
  broker: z.enum(['connected', 'disconnected']),
  database: z.enum(['reachable', 'unreachable']).describe('PostgreSQL (the failure index, claims, the log, portal sessions)'),
  merchants: z.string().optional().describe('Only while some merchant rows are sealed with a key this replica lacks (SECRETS_KEY rotation): how many; the replica is not ready meanwhile'),
  deliveryLog: z
    .strictObject({
      database: z.enum(['up', 'unreachable', 'off']),
      behindSeconds: z.number().int().min(0).nullable().describe('Seconds since the log last held every delivery record read'),
    })
    .optional(),
  waitingFor: z.string().optional().describe('While starting, or while the schema is not the version needed: what the API waits for'),
  detail: z.string().optional().describe('Why, when there is more to say: the schema version and the command to run (npx webhooks migrate)'),
});
