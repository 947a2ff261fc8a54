import { createHash } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import {
  type EventName,
  HEADERS,
  REFERENCE_FIELDS,
  rawMember,
  referencesOf,
  upstreamMessageSchema,
} from '../../libs/contracts/index.js';
import { InvalidMessageError } from './errors.js';

/** What the dispatcher needs from one message on `dispatch`, validated. */
export interface IntakeEvent {
  merchantId: string;
  event: EventName;
  /** The event's references, primary first (a refund has refundRef then tnxRef). */
  references: string[];
  /** The outgoing body, `{"event":…,"data":…}` with `data` exactly as received. */
  body: string;
  webhookId: string;
  /** Attempts already made before this delivery. */
  attempts: number;
  firstSeenAt: string;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

export function parseIntake(message: ConsumeMessage, maxBytes: number, now: Date): IntakeEvent {
  if (message.content.length > maxBytes) {
    throw new InvalidMessageError('too-large', `body is ${message.content.length} bytes, the limit is ${maxBytes}`);
  }
  let text: string;
  let json: unknown;
  try {
    text = utf8.decode(message.content);
    json = JSON.parse(text);
  } catch (err) {
    throw new InvalidMessageError('not-json', `body is not UTF-8 JSON (${(err as Error).message})`);
  }
  const parsed = upstreamMessageSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.join('.') || 'body';
    throw new InvalidMessageError('invalid-envelope', `${where}: ${issue.message}`);
  }
  const { merchantId, event, data } = parsed.data;
  const references = referencesOf(event, data);
  if (references.length === 0) {
    const fields = REFERENCE_FIELDS[event].map((f) => `data.${f}`).join(' or ');
    throw new InvalidMessageError('missing-reference', `${event} needs ${fields} as a non-empty string of at most 200 characters`);
  }
  const headers = message.properties.headers ?? {};
  const attempts = Number(headers[HEADERS.attempts] ?? 0);
  const firstSeen = headers[HEADERS.firstSeenAt];
  return {
    merchantId,
    event,
    references,
    body: `{"event":${JSON.stringify(event)},"data":${rawMember(text, 'data')!}}`,
    webhookId: webhookIdOf(message),
    attempts: Number.isInteger(attempts) && attempts >= 0 ? attempts : 0,
    firstSeenAt: typeof firstSeen === 'string' ? firstSeen : now.toISOString(),
  };
}

/**
 * The upstream messageId, or one derived from the body when upstream sent none: derived, not
 * random, so a redelivery after a crash carries the same webhook-id and merchants can dedupe.
 */
export function webhookIdOf(message: ConsumeMessage): string {
  const id = message.properties.messageId;
  if (typeof id === 'string' && id.length > 0) return id;
  return `msg_${createHash('sha256').update(message.content).digest('hex').slice(0, 32)}`;
}
