import type { ConsumeMessage } from 'amqplib';
import { type Attributes, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { DeliveryFailedError, WebhookNetworkError, type WebhookRequest, type WebhookResponse } from '../../../libs/http/index.js';
import { ATTR, childSpan, injectSpan, markFailed, MESSAGING_SYSTEM, safeUrl, type Span, spanFromHeaders } from '../../../libs/tracing/index.js';
import type { Decision } from './decide.js';
import type { IntakeEvent } from './intake.js';

/**
 * The dispatcher's spans, made only while tracing is on, passed down the stages by hand (an active
 * context costs an AsyncLocalStorage frame on every promise). One consumer span per delivery.
 */
let processing = { queue: '', name: '', attributes: {} };

export function deliverySpan(message: ConsumeMessage, queue: string): Span | undefined {
  if (queue !== processing.queue) {
    const operation = { [ATTR.messagingOperationType]: 'process', [ATTR.messagingOperationName]: 'process' };
    const attributes = { [ATTR.messagingSystem]: MESSAGING_SYSTEM, ...operation, [ATTR.messagingDestination]: queue };
    processing = { queue, name: `process ${queue}`, attributes };
  }
  const span = spanFromHeaders(processing.name, SpanKind.CONSUMER, message.properties.headers, processing.attributes);
  if (span?.isRecording()) {
    span.setAttribute(ATTR.messagingRoutingKey, message.fields.routingKey);
    if (typeof message.properties.messageId === 'string') span.setAttribute(ATTR.messagingMessageId, message.properties.messageId);
  }
  return span;
}

/** webhook.outcome where it is not the decision's kind. */
const OUTCOMES: Partial<Record<Decision['kind'], string>> = { retry: 'retrying', defer: 'deferred', throttle: 'throttled', postpone: 'postponed' };

/** A message fanned out: its span is every endpoint's walk's, so it says how many. */
export function describeFanOut(span: Span, intake: IntakeEvent, endpoints: number): void {
  if (!span.isRecording()) return;
  span.setAttribute(ATTR.webhookId, intake.webhookId).setAttribute(ATTR.merchantId, intake.merchantId).setAttribute(ATTR.event, intake.event);
  span.setAttribute(ATTR.outcome, 'fanned-out').setAttribute(ATTR.endpoints, endpoints);
}

export function describeDelivery(span: Span, intake: IntakeEvent | undefined, decision: Decision): void {
  if (!span.isRecording()) return;
  if (intake) span.setAttribute(ATTR.webhookId, intake.webhookId).setAttribute(ATTR.merchantId, intake.merchantId).setAttribute(ATTR.event, intake.event);
  const attempt = decision.kind === 'delivered' || decision.kind === 'retry' ? decision.attempt : decision.kind === 'failed' ? decision.attempts : intake?.attempts;
  if (attempt !== undefined) span.setAttribute(ATTR.attempt, attempt);
  span.setAttribute(ATTR.outcome, OUTCOMES[decision.kind] ?? decision.kind);
  if (decision.kind === 'failed') span.setStatus({ code: SpanStatusCode.ERROR, message: `failed: ${decision.reason}` });
  if (decision.kind === 'invalid') span.setStatus({ code: SpanStatusCode.ERROR, message: `invalid: ${decision.code}` });
}

const POST_ONLY: Attributes = { [ATTR.httpMethod]: 'POST' };

/** An endpoint's attributes, made once per URL (safeUrl() keeps one object per URL). */
const endpointAttributes = new WeakMap<object, Attributes>();

/** One HTTP attempt as a client span whose traceparent the request carries: a merchant that traces joins the trace. */
export function attemptSpan(parent: Span, request: WebhookRequest): Span {
  const url = safeUrl(request.url);
  let attributes = url && endpointAttributes.get(url);
  if (url && attributes === undefined) {
    attributes = { [ATTR.httpMethod]: 'POST', [ATTR.urlFull]: url.full, [ATTR.serverAddress]: url.address, [ATTR.serverPort]: url.port };
    endpointAttributes.set(url, attributes);
  }
  const span = childSpan(parent, 'POST', SpanKind.CLIENT, attributes ?? POST_ONLY);
  injectSpan(span, request.headers);
  return span;
}

/** Ends an attempt's span with the response's status, or the error that stopped it. */
export function endAttempt(span: Span, response: WebhookResponse | undefined, err?: unknown): void {
  if (response && span.isRecording()) {
    span.setAttribute(ATTR.httpStatus, response.status);
    if (response.status >= 400) span.setAttribute(ATTR.errorType, String(response.status)).setStatus({ code: SpanStatusCode.ERROR });
  } else if (!response && span.isRecording()) {
    markFailed(span, err, err instanceof WebhookNetworkError ? err.code : err instanceof DeliveryFailedError ? err.name : undefined);
  }
  span.end();
}
