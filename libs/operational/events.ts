import { createHash, randomUUID } from 'node:crypto';
import type { DisabledReason } from '../merchants/index.js';

/** Svix's names, so platform teams recognise them (DESIGN.md "Operational events"). */
export const OPERATIONAL_EVENT_TYPES = [
  'endpoint.disabled',
  'endpoint.enabled',
  'endpoint.updated',
  'endpoint.secret_rotated',
  'message.attempt.failing',
  'message.attempt.exhausted',
  'message.attempt.recovered',
] as const;

export type OperationalEventType = (typeof OPERATIONAL_EVENT_TYPES)[number];

/** A webhook's failed attempt that makes it "failing": its 4th, as Svix. */
export const FAILING_ATTEMPT = 4;

/** One operational event: the body published to `<prefix>.operational` (routing key = type) and POSTed to OPERATIONAL_WEBHOOK_URL. */
export interface OperationalEvent {
  type: OperationalEventType;
  timestamp: string;
  data: Record<string, unknown>;
}

/** An event and its AMQP messageId (also the operational webhook's webhook-id). */
export interface IdentifiedEvent {
  id: string;
  event: OperationalEvent;
}

interface EndpointFacts {
  merchantId: string;
  endpointId: string;
  url: string;
}

/** What a message.attempt.* event says about one webhook (attempted on the endpoint): all a reader needs without another call. */
export interface AttemptFacts extends EndpointFacts {
  webhookId: string;
  event: string;
  references: string[];
  attempts: number;
  lastHttpStatus?: number;
  lastError?: string;
  /** message.attempt.exhausted: why it went to failed (FAILED_REASONS). */
  reason?: string;
}

export function attemptEvent(type: 'message.attempt.failing' | 'message.attempt.exhausted' | 'message.attempt.recovered', facts: AttemptFacts, now: Date): IdentifiedEvent {
  const { merchantId, endpointId, url, webhookId, event, references, attempts } = facts;
  const data: Record<string, unknown> = { merchantId, endpointId, url, webhookId, event, references, attempts };
  data.lastHttpStatus = facts.lastHttpStatus ?? null;
  data.lastError = facts.lastError ?? null;
  if (type === 'message.attempt.exhausted') data.reason = facts.reason ?? null;
  return { id: idOf(type, merchantId, webhookId, randomUUID()), event: { type, timestamp: now.toISOString(), data } };
}

/** When disabled automatically, the attempt facts are of the webhook whose failure tipped it over. */
type DisabledFacts = EndpointFacts & { reason: DisabledReason; disabledAt: string; failingSince?: string } &
  Partial<Omit<AttemptFacts, keyof EndpointFacts | 'reason'>>;

/** Deterministic id (merchant, endpoint and the time it was turned off): a repeat after a crash carries the same messageId. */
export function disabledEvent(facts: DisabledFacts, now: Date): IdentifiedEvent {
  const { merchantId, endpointId, url, reason, disabledAt } = facts;
  const data: Record<string, unknown> = { merchantId, endpointId, url, reason, disabledAt };
  data.failingSince = facts.failingSince ?? null;
  data.lastHttpStatus = facts.lastHttpStatus ?? null;
  data.lastError = facts.lastError ?? null;
  if (facts.webhookId !== undefined) {
    data.webhookId = facts.webhookId;
    data.event = facts.event ?? null;
    data.references = facts.references ?? [];
    data.attempts = facts.attempts ?? null;
  }
  return { id: idOf('endpoint.disabled', merchantId, endpointId, disabledAt), event: { type: 'endpoint.disabled', timestamp: now.toISOString(), data } };
}

function endpointEvent(type: OperationalEventType, facts: EndpointFacts, at: string, now: Date): IdentifiedEvent {
  return { id: idOf(type, facts.merchantId, at, randomUUID()), event: { type, timestamp: now.toISOString(), data: { ...facts } } };
}

export function enabledEvent(facts: EndpointFacts & { enabledAt: string }, now: Date): IdentifiedEvent {
  return endpointEvent('endpoint.enabled', facts, facts.enabledAt, now);
}

export function updatedEvent(facts: EndpointFacts & { previousUrl: string; changed: string[]; events: string[] | null; updatedAt: string }, now: Date): IdentifiedEvent {
  return endpointEvent('endpoint.updated', facts, facts.updatedAt, now);
}

export function secretRotatedEvent(facts: EndpointFacts & { rotatedAt: string }, now: Date): IdentifiedEvent {
  return endpointEvent('endpoint.secret_rotated', facts, facts.rotatedAt, now);
}

/** `op_` and 32 hex characters: a well-formed webhook-id for the operational webhook as well. */
function idOf(...parts: string[]): string {
  return `op_${createHash('sha256').update(parts.join('\u0000')).digest('hex').slice(0, 32)}`;
}
