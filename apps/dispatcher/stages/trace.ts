import type { ConsumeMessage } from 'amqplib';
import { context, ROOT_CONTEXT, type Span, SpanStatusCode, trace } from '@opentelemetry/api';
import { DeliveryFailedError, WebhookNetworkError, type WebhookHttpClient, type WebhookRequest, type WebhookResponse } from '../../../libs/http/index.js';
import { ATTR, contextFromHeaders, injectInto, markFailed, MESSAGING_SYSTEM, recordingSpan, safeUrl, SpanKind } from '../../../libs/tracing/index.js';
import type { Decision } from './decide.js';
import type { IntakeEvent } from './intake.js';

/**
 * The dispatcher's spans, used only while tracing is on (the dispatcher asks tracingActive()
 * first, so with tracing off a delivery builds none of this). One consumer span per delivery
 * (`process <prefix>.dispatch`), continuing the trace its message carries: the publisher's, an
 * upstream client's own traceparent, or, on a retry or a resend, the move that put it back.
 */
export function traceDelivery(message: ConsumeMessage, queue: string, walk: (span: Span) => Promise<void>): Promise<void> {
  const parent = contextFromHeaders(message.properties.headers, ROOT_CONTEXT);
  const span = recordingSpan(`process ${queue}`, SpanKind.CONSUMER, undefined, parent);
  if (span.isRecording()) {
    span.setAttributes({
      [ATTR.messagingSystem]: MESSAGING_SYSTEM,
      [ATTR.messagingOperationType]: 'process',
      [ATTR.messagingOperationName]: 'process',
      [ATTR.messagingDestination]: queue,
      [ATTR.messagingRoutingKey]: message.fields.routingKey,
    });
    if (typeof message.properties.messageId === 'string') span.setAttribute(ATTR.messagingMessageId, message.properties.messageId);
  }
  return context.with(trace.setSpan(parent, span), () => walk(span)).finally(() => span.end());
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
export function describeDelivery(span: Span, intake: IntakeEvent | undefined, decision: Decision): void {
  if (!span.isRecording()) return;
  if (intake) {
    span.setAttributes({
      [ATTR.webhookId]: intake.webhookId,
      [ATTR.merchantId]: intake.merchantId,
      [ATTR.event]: intake.event,
    });
  }
  const attempt = decision.kind === 'delivered' || decision.kind === 'retry' ? decision.attempt : decision.kind === 'failed' ? decision.attempts : intake?.attempts;
  if (attempt !== undefined) span.setAttribute(ATTR.attempt, attempt);
  span.setAttribute(ATTR.outcome, OUTCOMES[decision.kind]);
  if (decision.kind === 'failed') span.setStatus({ code: SpanStatusCode.ERROR, message: `failed: ${decision.reason}` });
  if (decision.kind === 'invalid') span.setStatus({ code: SpanStatusCode.ERROR, message: `invalid: ${decision.code}` });
}

/**
 * One HTTP attempt as a client span (method, URL without query, server address, status, duration)
 * whose traceparent the merchant's request carries, so a merchant that traces joins the trace.
 */
export async function tracedPost(http: WebhookHttpClient, request: WebhookRequest): Promise<WebhookResponse> {
  const parent = context.active();
  const span = recordingSpan('POST', SpanKind.CLIENT, undefined, parent);
  if (span.isRecording()) {
    const url = safeUrl(request.url);
    span.setAttribute(ATTR.httpMethod, 'POST');
    if (url) span.setAttributes({ [ATTR.urlFull]: url.full, [ATTR.serverAddress]: url.address, [ATTR.serverPort]: url.port });
  }
  const ctx = trace.setSpan(parent, span);
  injectInto(request.headers, ctx);
  try {
    const response = await context.with(ctx, () => http.post(request));
    span.setAttribute(ATTR.httpStatus, response.status);
    if (response.status >= 400) {
      span.setAttribute(ATTR.errorType, String(response.status));
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
    return response;
  } catch (err) {
    const type = err instanceof WebhookNetworkError ? err.code : err instanceof DeliveryFailedError ? err.name : undefined;
    markFailed(span, err, type);
    throw err;
  } finally {
    span.end();
  }
}
