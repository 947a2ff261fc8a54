import { hash } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import {
  brokerPark, type EventName, HEADERS, foreignHeaderBytes, isEventName, isWellFormedReference, isWellFormedWebhookId,
  PLATFORM_MERCHANT_ID, REFERENCE_FIELDS, orderKeyOf, MAX_FOREIGN_HEADER_BYTES, rawMember, referencesOf, scalarHeaders,
  upstreamMessageSchema, WEBHOOK_ID_RULE,
} from '../../../libs/contracts/index.js';
import { OPERATIONAL_EVENT_TYPES, type OperationalEventType } from '../../../libs/operational/index.js';
import { ENDPOINT_ID } from '../../../libs/merchants/index.js';
import { InvalidMessageError } from '../errors.js';

/** What the dispatcher needs from one message on `dispatch`, validated. */
export interface IntakeEvent {
  /** The merchant, or PLATFORM_MERCHANT_ID for an operational event. */
  merchantId: string;
  /** From x-endpoint-id (ours only), else set by routing. */
  endpointId?: string;
  event: EventName | OperationalEventType;
  /** Primary first (a refund has refundRef then tnxRef); none for an operational event. */
  references: string[];
  /** The outgoing body: `{"event":…,"data":…}` with `data` exactly as received (an operational event's as published). */
  body: string;
  webhookId: string;
  attempts: number;
  deferrals: number;
  postponements: number;
  firstSeenAt: string;
  /** When a merchant asked for this webhook again; its schedule's span starts over then. */
  resentAt?: string;
  /** Which resend this copy belongs to (0: the webhook's own attempts). */
  resend?: number;
  /** The resend's claim on the failure: marked resent when this copy is taken. */
  resendClaim?: string;
  /** The last real attempt's, so a webhook failed by an open circuit still says it. */
  lastError?: string;
  lastStatus?: number;
  /** A wait handed back (x-wait-hand): its row's hand, which only this copy may take, rewrite or end. */
  hand?: number;
  /** A hand-back that is its endpoint's circuit's probe (x-circuit-probe). */
  probe?: boolean;
  /** Already accepted (a hand-back, a resend): a settings change sends it to `failed`, never drops it. */
  accepted: boolean;
  /** x-test-event: one attempt, no retry. */
  test?: boolean;
  orderKey?: string;
  /** In its reference's order: a head admitted here, or x-ordered on a hand-back. */
  ordered?: boolean;
  /** Moved back by hand from invalid, not a hand-back: its outcome ends its key's wait if that wait was spent. */
  movedBack?: boolean;
}

/** A hand-back's wait, enough to take and end it. */
export type HandBack = Pick<IntakeEvent, 'merchantId' | 'webhookId' | 'endpointId' | 'ordered'> & { hand: number };

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Validates a message on `dispatch`. Our bookkeeping headers are read only from messages that did
 * not come straight from upstream's exchange, and a header of the wrong type counts as absent.
 */
export function parseIntake(message: ConsumeMessage, maxBytes: number, now: Date, upstreamExchange: string, dispatch: string): IntakeEvent {
  if (message.content.length > maxBytes) {
    throw new InvalidMessageError('too-large', `body is ${message.content.length} bytes, the limit is ${maxBytes}`);
  }
  // Every copy carries them: too large, none could be published.
  const headerBytes = foreignHeaderBytes(scalarHeaders(message.properties.headers));
  if (headerBytes > MAX_FOREIGN_HEADER_BYTES) {
    throw new InvalidMessageError('too-large', `headers are ${headerBytes} bytes, the limit is ${MAX_FOREIGN_HEADER_BYTES}; parked without them`);
  }
  // RabbitMQ 3.10 dead-letters a message whose x-death has an entry for this queue by counting that
  // entry, keeping the exchange it names: written by upstream, its parked copy would pass for ours.
  if (message.fields.exchange === upstreamExchange && brokerPark(message.properties.headers, dispatch) !== undefined) {
    throw new InvalidMessageError('upstream-x-death', `x-death has an entry for ${dispatch}, which only the broker writes when it dead-letters a message from there; parked without it`);
  }
  if (hasIllFormedMessageId(message)) {
    throw new InvalidMessageError('invalid-message-id', `messageId must be ${WEBHOOK_ID_RULE}`);
  }
  let text: string;
  let json: unknown;
  try {
    text = utf8.decode(message.content);
    json = JSON.parse(text);
  } catch (err) {
    // V8's message quotes the body around the fault (a card number, a name): only its position is kept.
    const at = /position (\d+)/.exec((err as Error).message)?.[1];
    throw new InvalidMessageError('not-json', `body is not UTF-8 JSON${at === undefined ? '' : ` (at position ${at})`}`);
  }
  const ours = message.fields.exchange !== upstreamExchange;
  // An operational event (its exchange, or a hand-back) is for the platform's endpoint. Never from
  // upstream's exchange, nor from the default exchange without a wait's hand (moved back from invalid).
  const handedBack = count(message.properties.headers?.[HEADERS.waitHand]) > 0;
  const operational = ours && (message.fields.exchange !== '' || handedBack) ? operationalTypeOf(json) : undefined;
  const { merchantId, event, references, body, orderKey } = operational !== undefined
    ? { merchantId: PLATFORM_MERCHANT_ID, event: operational, references: [], body: text, orderKey: undefined }
    : merchantEventOf(json, text);
  const headers = ours ? (message.properties.headers ?? {}) : {};
  const resentAt = timestamp(headers[HEADERS.resentAt]);
  const claim = headers[HEADERS.claimId];
  const lastError = headers[HEADERS.lastError];
  const lastStatus = headers[HEADERS.lastStatus];
  const hand = count(headers[HEADERS.waitHand]);
  const test = message.properties.headers?.[HEADERS.testEvent] === true;
  // A test event's endpoint is trusted from upstream's exchange: it only narrows the delivery.
  const endpointId = (test ? message.properties.headers : headers)?.[HEADERS.endpointId];
  return {
    merchantId, endpointId: endpointIdOf(endpointId), event, references, body, webhookId: webhookIdOf(message),
    attempts: count(headers[HEADERS.attempts]),
    deferrals: count(headers[HEADERS.deferrals]),
    postponements: count(headers[HEADERS.postponements]),
    firstSeenAt: timestamp(headers[HEADERS.firstSeenAt]) ?? now.toISOString(),
    resentAt,
    resend: resentAt === undefined ? undefined : count(headers[HEADERS.resend]),
    resendClaim: resentAt !== undefined && typeof claim === 'string' && /^[0-9a-f-]{36}$/.test(claim) ? claim : undefined,
    lastError: typeof lastError === 'string' && lastError.length > 0 ? lastError : undefined,
    lastStatus: typeof lastStatus === 'number' && Number.isInteger(lastStatus) ? lastStatus : undefined,
    hand: hand > 0 ? hand : undefined,
    ...(hand > 0 && headers[HEADERS.circuitProbe] === true ? { probe: true } : {}),
    accepted: hand > 0 || resentAt !== undefined,
    // From any exchange: the mark only takes attempts away.
    test,
    orderKey,
    ordered: hand > 0 && orderedHandBack(headers),
    // Its wait's copies carry the routing key too: only one with no hand is the copy moved back.
    ...(hand === 0 && typeof headers[HEADERS.originalRoutingKey] === 'string' ? { movedBack: true } : {}),
  };
}

function merchantEventOf(json: unknown, text: string) {
  const { merchantId, event, data } = envelopeOf(json);
  // The platform's id is no merchant's: upstream cannot publish an operational event.
  if (merchantId === PLATFORM_MERCHANT_ID) throw new InvalidMessageError('unknown-merchant', `no merchant ${merchantId}: the operational events' own id`);
  const references = referencesOf(event, data);
  if (references.length === 0) {
    const fields = REFERENCE_FIELDS[event].map((f) => `data.${f}`).join(' or ');
    throw new InvalidMessageError('missing-reference', `${event} needs ${fields} as a string of 1 to 200 characters without control characters or a lone surrogate`);
  }
  const body = `{"event":${JSON.stringify(event)},"data":${rawMember(text, 'data')!}}`;
  return { merchantId, event, references, body, orderKey: orderKeyOf(event, data) };
}

/**
 * A hand-back's wait from the headers our scheduler sets, without reading the body: what a hand-back
 * that fails intake ends with its park. Never on a message from upstream's exchange.
 */
export function handBackOf(message: ConsumeMessage, upstreamExchange: string): HandBack | undefined {
  const headers = message.properties.headers ?? {};
  const hand = count(headers[HEADERS.waitHand]);
  const merchantId = headers[HEADERS.merchantId];
  if (message.fields.exchange === upstreamExchange || hand === 0 || typeof merchantId !== 'string' || merchantId === '') return undefined;
  return { merchantId, webhookId: webhookIdOf(message), endpointId: endpointIdOf(headers[HEADERS.endpointId]), hand, ordered: orderedHandBack(headers) };
}

/**
 * A resent copy is outside the order, and its waits are unmarked, unless its first took over a row
 * that held its webhook's place (libs/waits/store.ts WRITE): then its end ends that place.
 */
function orderedHandBack(headers: Record<string, unknown>): boolean {
  return headers[HEADERS.ordered] === true;
}

function endpointIdOf(value: unknown): string | undefined {
  return typeof value === 'string' && ENDPOINT_ID.test(value) ? value : undefined;
}

/** The envelope, checked by hand for the schema's rules, and by the (slower) schema only for its error. */
export function envelopeOf(json: unknown): { merchantId: string; event: EventName; data: Record<string, unknown> } {
  if (typeof json === 'object' && json !== null && !Array.isArray(json)) {
    const { merchantId, event, data } = json as Record<string, unknown>;
    if (
      typeof merchantId === 'string' && isWellFormedReference(merchantId) &&
      isEventName(event) &&
      typeof data === 'object' && data !== null && !Array.isArray(data) && Object.getPrototypeOf(data) === Object.prototype
    ) {
      return { merchantId, event, data: data as Record<string, unknown> };
    }
  }
  const parsed = upstreamMessageSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.join('.') || 'body';
    throw new InvalidMessageError('invalid-envelope', `${where}: ${issue.message}`);
  }
  return parsed.data;
}

/** The type of an operational event's body (`{"type","timestamp","data"}`); one with a merchantId is a merchant's event. */
function operationalTypeOf(json: unknown): OperationalEventType | undefined {
  if (typeof json !== 'object' || json === null || Array.isArray(json) || 'merchantId' in json) return undefined;
  const { type, timestamp, data } = json as Record<string, unknown>;
  if (!(OPERATIONAL_EVENT_TYPES as readonly unknown[]).includes(type) || typeof timestamp !== 'string') return undefined;
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return undefined;
  return type as OperationalEventType;
}

function count(value: unknown): number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : 0;
}

function timestamp(value: unknown): string | undefined {
  return typeof value === 'string' && value.length <= 40 && Number.isFinite(Date.parse(value)) ? value : undefined;
}

/**
 * Whether idempotent intake checks this copy's key, and as a redelivery or not; asked before
 * routing. Upstream's publish is checked, not a test event. A copy moved back from invalid that was
 * parked before any walk is checked as a redelivery. The service's own copies never are.
 */
export function keyCheckOf(message: ConsumeMessage, intake: IntakeEvent, upstreamExchange: string): { redelivered: boolean } | undefined {
  if (intake.test) return undefined;
  if (message.fields.exchange === upstreamExchange) return { redelivered: message.fields.redelivered };
  const movedBack = intake.movedBack === true && intake.endpointId === undefined && !intake.accepted &&
    intake.attempts + intake.deferrals + intake.postponements === 0;
  return movedBack ? { redelivered: true } : undefined;
}

/** The body's digest an intake key keeps: only with upstream's messageId (without one the key is the body's digest). */
export function intakeDigestOf(message: ConsumeMessage): Buffer | undefined {
  const id = message.properties.messageId;
  return typeof id === 'string' && id.length > 0 ? hash('sha256', message.content, 'buffer').subarray(0, 16) : undefined;
}

/** A messageId intake parks (an empty one counts as none). */
export function hasIllFormedMessageId(message: ConsumeMessage): boolean {
  const messageId = message.properties.messageId as unknown;
  return messageId !== undefined && messageId !== null && messageId !== '' && !isWellFormedWebhookId(messageId);
}

/** The upstream messageId, or one derived from the body: a redelivery carries the same webhook-id. */
export function webhookIdOf(message: ConsumeMessage): string {
  const id = message.properties.messageId;
  if (typeof id === 'string' && id.length > 0) return id;
  return `msg_${hash('sha256', message.content).slice(0, 32)}`;
}
