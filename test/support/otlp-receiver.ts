import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TracingSettings } from '../../libs/config/index.js';
import { decodeTraceRequest } from './otlp-proto.js';

type AttributeValue = string | number | boolean;

/** One span as the exporter sent it (OTLP/HTTP, JSON or protobuf), decoded. */
export interface ReceivedSpan {
  service: string;
  /** The exporting program's service.instance.id, when its resource has one. */
  instance?: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  traceState?: string;
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
 * A real OTLP/HTTP receiver on loopback: it decodes what the exporter posts to /v1/traces, JSON
 * (http/json) or protobuf (http/protobuf), into the same spans. `hang` leaves
 * every request unanswered, as a collector that accepts connections and never replies; `page`
 * answers 200 with a web page, as a web server or an ingress at an endpoint that is no collector.
 */
export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  /** Content types of every export request, in order. */
  readonly requests: string[] = [];
  private readonly held = new Set<ServerResponse>();

  private constructor(private readonly server: Server, readonly url: string) {}

  static async start(mode: 'answer' | 'hang' | 'page' = 'answer'): Promise<OtlpReceiver> {
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
        if (mode === 'page') {
          res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>Welcome to nginx!</body></html>');
          return;
        }
        const body = Buffer.concat(chunks);
        receiver.take(type.includes('json') ? JSON.parse(body.toString('utf8')) : decodeTraceRequest(body));
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
            ...(span.traceState ? { traceState: span.traceState } : {}),
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

/** Tracing settings as a program would parse them, exporting to `url`: every span sampled, the batch processor's defaults. */
export function testTracingSettings(url: string, protocol: 'http/json' | 'http/protobuf' = 'http/json'): TracingSettings {
  return {
    url,
    protocol,
    serviceName: 'test',
    sampler: { name: 'parentbased_always_on', ratio: 1 },
    resourceAttributes: {},
    batch: { maxQueueSize: 16_384, maxExportBatchSize: 2_048, scheduledDelayMillis: 500, exportTimeoutMillis: 30_000 },
  };
}
