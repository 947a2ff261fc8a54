import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

type AttributeValue = string | number | boolean;

/** One span as the exporter sent it (OTLP/HTTP JSON), decoded. */
export interface ReceivedSpan {
  service: string;
  /** The exporting program's service.instance.id, when its resource has one. */
  instance?: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  /** OTLP's numbering: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, AttributeValue>;
  links: Array<{ traceId: string; spanId: string; attributes: Record<string, AttributeValue> }>;
  status?: { code?: number; message?: string };
  startNs: bigint;
  endNs: bigint;
}

export const KIND = { internal: 1, server: 2, client: 3, producer: 4, consumer: 5 } as const;

interface OtlpKeyValue {
  key: string;
  value: { stringValue?: string; intValue?: number | string; doubleValue?: number; boolValue?: boolean };
}

function attributesOf(list: OtlpKeyValue[] | undefined): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const { key, value } of list ?? []) {
    if (value.stringValue !== undefined) out[key] = value.stringValue;
    else if (value.intValue !== undefined) out[key] = Number(value.intValue);
    else if (value.doubleValue !== undefined) out[key] = value.doubleValue;
    else if (value.boolValue !== undefined) out[key] = value.boolValue;
  }
  return out;
}

/**
 * A real OTLP/HTTP receiver on loopback: it decodes the JSON the exporter posts to /v1/traces
 * (http/json) and counts protobuf posts (http/protobuf) without decoding them. `hang` leaves
 * every request unanswered, as a collector that accepts connections and never replies.
 */
export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  /** Content types of every export request, in order. */
  readonly requests: string[] = [];
  /** Spans in each http/json request, in order. */
  readonly spansPerRequest: number[] = [];
  private readonly held = new Set<ServerResponse>();

  private constructor(private readonly server: Server, readonly url: string) {}

  static async start(mode: 'answer' | 'hang' = 'answer'): Promise<OtlpReceiver> {
    let receiver!: OtlpReceiver;
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const type = String(req.headers['content-type'] ?? '');
        receiver.requests.push(type);
        if (mode === 'hang') {
          receiver.held.add(res);
          return;
        }
        if (type.includes('json')) receiver.take(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        res.writeHead(200, { 'content-type': type.includes('json') ? 'application/json' : 'application/x-protobuf' }).end(type.includes('json') ? '{}' : '');
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    receiver = new OtlpReceiver(server, `http://127.0.0.1:${port}/v1/traces`);
    return receiver;
  }

  get endpoint(): string {
    return this.url.replace(/\/v1\/traces$/, '');
  }

  private take(body: { resourceSpans?: Array<{ resource?: { attributes?: OtlpKeyValue[] }; scopeSpans?: Array<{ spans?: any[] }> }> }): void {
    const before = this.spans.length;
    for (const resourceSpans of body.resourceSpans ?? []) {
      const resource = attributesOf(resourceSpans.resource?.attributes);
      const service = String(resource['service.name'] ?? '');
      const instance = resource['service.instance.id'] === undefined ? undefined : String(resource['service.instance.id']);
      for (const scope of resourceSpans.scopeSpans ?? []) {
        for (const span of scope.spans ?? []) {
          this.spans.push({
            service,
            ...(instance === undefined ? {} : { instance }),
            traceId: span.traceId,
            spanId: span.spanId,
            parentSpanId: span.parentSpanId || undefined,
            name: span.name,
            kind: span.kind,
            attributes: attributesOf(span.attributes),
            links: (span.links ?? []).map((link: { traceId: string; spanId: string; attributes?: OtlpKeyValue[] }) => ({
              traceId: link.traceId,
              spanId: link.spanId,
              attributes: attributesOf(link.attributes),
            })),
            status: span.status,
            startNs: BigInt(span.startTimeUnixNano),
            endNs: BigInt(span.endTimeUnixNano),
          });
        }
      }
    }
    this.spansPerRequest.push(this.spans.length - before);
  }

  inTrace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((span) => span.traceId === traceId);
  }

  async close(): Promise<void> {
    for (const res of this.held) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
