import { z } from 'zod';
import type { OperationalEventType } from './events.js';

/** Each operational event's body, for the OpenAPI catalog; a test checks the builders' events against these. */
const merchantId = z.string().describe('The merchant');
const endpointId = z.string().describe("Which of the merchant's endpoints (ep_…)");
const url = z.string().describe("The endpoint's URL");
const lastHttpStatus = z.number().int().nullable().describe('HTTP status of the last attempt; null when none answered (timeout, network error)');
const lastError = z.string().nullable().describe('The last attempt\'s error in full, for the platform ("HTTP 503", "timeout after 10000 ms", "ECONNREFUSED: ..."); merchants see only its class');

const attempt = z.object({
  merchantId,
  endpointId,
  url,
  webhookId: z.string().describe('The webhook (its webhook-id header)'),
  event: z.string().describe('charge.completed, payout or refund.completed'),
  references: z.array(z.string()).describe('Its transaction references, to resend it by'),
  attempts: z.number().int().describe('Attempts made so far'),
  lastHttpStatus,
  lastError,
  suppressed: z.number().int().optional().describe('Events of this kind for the same endpoint folded into this one within OPERATIONAL_EVENT_INTERVAL'),
});

const DATA: Record<OperationalEventType, z.ZodObject> = {
  'message.attempt.failing': attempt.describe("A webhook's 4th attempt failed; sent once per webhook"),
  'message.attempt.exhausted': attempt
    .extend({ reason: z.string().nullable().describe('Why it went to the failed queue, e.g. attempts-exhausted, endpoint-disabled') })
    .describe('A webhook went to the failed queue: resendable'),
  'message.attempt.recovered': attempt.describe('A webhook that had a failing event was delivered'),
  'endpoint.disabled': z
    .object({
      merchantId,
      endpointId,
      url,
      reason: z.enum(['failing', 'manual']).describe('failing: every attempt failed for ENDPOINT_DISABLE_AFTER; manual: turned off by the admin API, the CLI or the portal'),
      disabledAt: z.string().describe('ISO 8601'),
      failingSince: z.string().nullable().describe('ISO 8601: the first failure after the last success'),
      lastHttpStatus,
      lastError,
      webhookId: z.string().optional().describe('The webhook whose failure tipped it over (automatic disable)'),
      event: z.string().nullable().optional(),
      references: z.array(z.string()).optional(),
      attempts: z.number().int().nullable().optional(),
    })
    .describe("One of a merchant's endpoints was turned off (the others are not); new events for it are skipped (and listed in its feed) until it is turned on"),
  'endpoint.enabled': z.object({ merchantId, endpointId, url, enabledAt: z.string().describe('ISO 8601') }).describe('An endpoint was turned back on; deliveries resume'),
  'endpoint.updated': z
    .object({
      merchantId,
      endpointId,
      url: url.describe('The endpoint URL now'),
      previousUrl: z.string().describe('The URL before this change'),
      changed: z.array(z.enum(['url', 'events'])).describe('What changed'),
      events: z.array(z.string()).nullable().describe('The events it receives now; null: all of them'),
      updatedAt: z.string().describe('ISO 8601'),
    })
    .describe("A merchant's endpoint URL or events changed (admin API, CLI or portal); who did it is in the audit trail"),
  'endpoint.secret_rotated': z
    .object({ merchantId, endpointId, url, rotatedAt: z.string().describe('ISO 8601') })
    .describe("One endpoint's secret was replaced (never the secret itself); the old one may still sign during its grace"),
};

export function operationalEventSchema(type: OperationalEventType): z.ZodObject {
  return z
    .object({ type: z.literal(type), timestamp: z.string().describe('ISO 8601, when the event was made'), data: DATA[type] })
    .describe(DATA[type].description ?? type);
}
