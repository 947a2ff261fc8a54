import type { ConsumeMessage } from 'amqplib';
import { SpanKind } from '@opentelemetry/api';
import { DeliveryFailedError, WebhookNetworkError, type WebhookRequest, type WebhookResponse } from '../../../libs/http/index.js';
import { ATTR, ATTR_CODE, encodeAttributes, type ExplicitSpan, MESSAGING_SYSTEM, safeUrl, spanFromHeaders } from '../../../libs/tracing/index.js';
import type { Decision } from './decide.js';
import type { IntakeEvent } from './intake.js';

/**
 * The dispatcher's spans, made only while tracing is on (the dispatcher asks for one first, so
 * with tracing off a delivery builds none of this). They are explicit spans: the delivery's span
 * is passed down the stages by hand, not through the active context, because the hot path cannot
 * afford the SDK's span objects or AsyncLocalStorage (BENCHMARKS.md section 14). One consumer span
 * per delivery (`process <prefix>.dispatch`), continuing the trace its message carries: the
 * publisher's, an upstream client's own traceparent, or, on a retry or a resend, the move that
 * put it back.
 */
let processing = { queue: '', name: '', constants: () => ({}) };

export function deliverySpan(message: ConsumeMessage, queue: string): ExplicitSpan | undefined {
  if (queue !== processing.queue) {
    processing = {
      queue,
      name: `process ${queue}`,
      constants: () => ({
        [ATTR.messagingSystem]: MESSAGING_SYSTEM,
        [ATTR.messagingOperationType]: 'process',
        [ATTR.messagingOperationName]: 'process',
        [ATTR.messagingDestination]: queue,
      }),
    };
  }
  const span = spanFromHeaders(processing.name, SpanKind.CONSUMER, message.properties.headers, processing.constants);
  if (span?.sampled) {
    span.set(ATTR_CODE.messagingRoutingKey, message.fields.routingKey);
    if (typeof message.properties.messageId === 'string') span.set(ATTR_CODE.messagingMessageId, message.properties.messageId);
  }
  return span;
}

/** What the record calls the outcome, for webhook.outcome. */
const OUTCOMES: Record<Decision['kind'], string> = {
  delivered: 'delivered',
  retry: 'retrying',
  defer: 'deferred',
  postpone: 'postponed',
  failed: 'failed',
  skipped: 'skipped',
  invalid: 'invalid',
  superseded: 'superseded',
  returned: 'returned',
};

/** The webhook's attributes and the walk's outcome on the delivery span. */
export function describeDelivery(span: ExplicitSpan, intake: IntakeEvent | undefined, decision: Decision): void {
  if (!span.sampled) return;
  if (intake) span.set(ATTR_CODE.webhookId, intake.webhookId).set(ATTR_CODE.merchantId, intake.merchantId).set(ATTR_CODE.event, intake.event);
  const attempt = decision.kind === 'delivered' || decision.kind === 'retry' ? decision.attempt : decision.kind === 'failed' ? decision.attempts : intake?.attempts;
  if (attempt !== undefined) span.set(ATTR_CODE.attempt, attempt);
  span.set(ATTR_CODE.outcome, OUTCOMES[decision.kind]);
  if (decision.kind === 'failed') span.error(`failed: ${decision.reason}`);
  if (decision.kind === 'invalid') span.error(`invalid: ${decision.code}`);
}

/**
 * One HTTP attempt as a client span (method, URL without query, server address, status, duration)
 * whose traceparent the merchant's request carries, so a merchant that traces joins the trace.
 */
const POST = () => ({ [ATTR.httpMethod]: 'POST' });

/** An endpoint's URL attributes, encoded once per URL (safeUrl() keeps one object per URL). */
const urlAttributes = new WeakMap<object, Uint8Array>();

export function attemptSpan(parent: ExplicitSpan, request: WebhookRequest): ExplicitSpan {
  const span = parent.child('POST', SpanKind.CLIENT, POST);
  if (span.sampled) {
    const url = safeUrl(request.url);
    if (url) {
      let encoded = urlAttributes.get(url);
      if (encoded === undefined) {
        encoded = encodeAttributes({ [ATTR.urlFull]: url.full, [ATTR.serverAddress]: url.address, [ATTR.serverPort]: url.port });
        urlAttributes.set(url, encoded);
      }
      span.setEncoded(encoded);
    }
  }
  span.inject(request.headers);
  return span;
}

/**
 * Ends an attempt's span with the response's status, or with the error that stopped it. The
 * attempt stage ends it in its own try rather than through a wrapper's promise callbacks: one
 * promise and two closures less per delivery.
 */
export function endAttempt(span: ExplicitSpan, response: WebhookResponse | undefined, err?: unknown): void {
  if (response) {
    if (span.sampled) {
      span.set(ATTR_CODE.httpStatus, response.status);
      if (response.status >= 400) span.fail(String(response.status));
    }
  } else {
    const type = err instanceof WebhookNetworkError ? err.code : err instanceof DeliveryFailedError ? err.name : (err as Error)?.name ?? 'Error';
    span.fail(type, String((err as Error)?.message ?? err));
  }
  span.end();
}
