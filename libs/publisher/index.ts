import { randomUUID } from 'node:crypto';
import { type BrokerConnection, sendDeclaring } from '../broker/index.js';
import { HEADERS, referencesOf, type UpstreamMessage, upstreamMessageSchema, webhookHeaders } from '../contracts/index.js';
import { topologyNames } from '../topology/index.js';
import { ATTR, publishSpan } from '../tracing/index.js';

/** An event id as the publisher makes one when upstream gives none. */
export function newEventId(): string {
  return `evt_${randomUUID()}`;
}

export class EventPublisher {
  private readonly exchange: string;

  constructor(private readonly broker: BrokerConnection, prefix: string) {
    this.exchange = topologyNames(prefix).events;
  }

  /** `endpointId`: the one endpoint a `test` event is for. Returns the event id, the webhook-id the merchant sees. */
  async publish(message: UpstreamMessage, options: { messageId?: string; test?: boolean; endpointId?: string; deadlineMs?: number } = {}) {
    const checked = upstreamMessageSchema.parse(message);
    const messageId = options.messageId ?? newEventId();
    // Headers only for people reading the RabbitMQ console; the dispatcher trusts the body.
    const headers = webhookHeaders(checked.merchantId, checked.event, messageId, referencesOf(checked.event, checked.data));
    if (options.test) headers[HEADERS.testEvent] = true;
    if (options.test && options.endpointId) headers[HEADERS.endpointId] = options.endpointId;
    const body = Buffer.from(JSON.stringify(message));
    const attributes = {
      [ATTR.messagingRoutingKey]: checked.event,
      [ATTR.messagingMessageId]: messageId,
      [ATTR.messagingBodySize]: body.length,
      [ATTR.webhookId]: messageId,
      [ATTR.merchantId]: checked.merchantId,
      [ATTR.event]: checked.event,
    };
    const send = () =>
      this.broker.publish(this.exchange, checked.event, body, {
        persistent: true,
        contentType: 'application/json',
        messageId,
        timestamp: Math.floor(Date.now() / 1000),
        headers,
      }, options.deadlineMs);
    await publishSpan(this.exchange, headers, attributes, () => sendDeclaring(this.broker, send));
    return { messageId, routingKey: checked.event };
  }
}
