import { z } from 'zod';
import { ENDPOINT_ID, webhookEventsSchema } from './schema.js';
import { enabledField, expecting, orderByReferenceField, urlField } from './settings-input.js';
import { maxPerSecondField } from './throttle-setting.js';

/** The fields an endpoint's input may name (the secret is the service's: rotate it). */
const ENDPOINT_FIELDS = ['url', 'description', 'enabled', 'events', 'maxPerSecond', 'orderByReference'] as const;
const descriptionField = z.string({ error: expecting('a string') }).max(500, 'must be at most 500 characters');

/** A new endpoint: on unless `enabled` says otherwise; every event unless `events` names some. */
export const endpointInputSchema = z.strictObject(
  {
    url: urlField,
    description: descriptionField.optional(),
    enabled: enabledField.default(true),
    events: webhookEventsSchema.optional(),
    maxPerSecond: maxPerSecondField.optional(),
    orderByReference: orderByReferenceField.optional(),
  },
  { error: expecting('a JSON object with url, and optionally description, enabled, events, maxPerSecond and orderByReference', ENDPOINT_FIELDS) },
);
export type EndpointInput = z.infer<typeof endpointInputSchema>;

/** PATCH of one endpoint (JSON merge patch): `events`, `maxPerSecond`, `description` null go back to none. */
export const endpointPatchSchema = z.strictObject(
  {
    url: urlField.optional(),
    description: descriptionField.nullable().optional(),
    enabled: enabledField.optional(),
    events: webhookEventsSchema.nullable().optional(),
    maxPerSecond: maxPerSecondField.nullable().optional(),
    orderByReference: orderByReferenceField.optional(),
  },
  { error: expecting('a JSON object with url, description, enabled, events, maxPerSecond or orderByReference', ENDPOINT_FIELDS) },
);
export type EndpointPatch = z.infer<typeof endpointPatchSchema>;

export const endpointIdSchema = z.string().regex(ENDPOINT_ID, 'must be an endpoint id (ep_…)');
