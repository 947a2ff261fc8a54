import { BoundedMap } from '../runtime/bounded-map.js';

/** Span attributes: OpenTelemetry's conventions and the webhook's own; never a secret, a signature or a payload. */
export const ATTR = {
  messagingSystem: 'messaging.system',
  messagingOperationType: 'messaging.operation.type',
  messagingOperationName: 'messaging.operation.name',
  messagingDestination: 'messaging.destination.name',
  messagingRoutingKey: 'messaging.rabbitmq.destination.routing_key',
  messagingMessageId: 'messaging.message.id',
  messagingBodySize: 'messaging.message.body.size',
  httpMethod: 'http.request.method',
  httpStatus: 'http.response.status_code',
  httpRoute: 'http.route',
  urlFull: 'url.full',
  urlScheme: 'url.scheme',
  serverAddress: 'server.address',
  serverPort: 'server.port',
  errorType: 'error.type',
  webhookId: 'webhook.id',
  merchantId: 'webhook.merchant_id',
  event: 'webhook.event',
  attempt: 'webhook.attempt',
  outcome: 'webhook.outcome',
  reference: 'webhook.reference',
  endpoints: 'webhook.endpoints',
} as const;

export const MESSAGING_SYSTEM = 'rabbitmq';

/** A URL as a span may show it: no query, fragment, user or password (a merchant's URL may carry a token); parsed once. */
export function safeUrl(url: string): SafeUrl | undefined {
  if (!safeUrls.has(url)) safeUrls.set(url, parseSafeUrl(url));
  return safeUrls.get(url);
}

type SafeUrl = { full: string; address: string; port: number; scheme: string };
const safeUrls = new BoundedMap<string, SafeUrl | undefined>(10_000);

function parseSafeUrl(url: string): SafeUrl | undefined {
  if (!URL.canParse(url)) return undefined;
  const parsed = new URL(url);
  const scheme = parsed.protocol.replace(/:$/, '');
  const port = parsed.port !== '' ? Number(parsed.port) : scheme === 'https' ? 443 : 80;
  return { full: `${parsed.protocol}//${parsed.host}${parsed.pathname}`, address: parsed.hostname, port, scheme };
}
