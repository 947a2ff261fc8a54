import { SpanWriter, varintSize, writeVarint } from './span-records.js';

/**
 * An OTLP/protobuf ExportTraceServiceRequest around span records, which are already protobuf
 * Spans (span-records.ts): the export worker's encoder writes the envelope, encoded once, and
 * copies the records after it. Field numbers are those of
 * opentelemetry/proto/collector/trace/v1/trace_service.proto and trace/v1/trace.proto;
 * test/unit/otlp-protobuf.test.ts checks the output against the SDK's own serializer, field by
 * field.
 */
const REQUEST_RESOURCE_SPANS = 0x0a;
const RESOURCE_SPANS = { resource: 0x0a, scopeSpans: 0x12 } as const;
const RESOURCE_ATTRIBUTES = 0x0a;
const SCOPE_SPANS_SCOPE = 0x0a;
const SCOPE = { name: 0x0a, version: 0x12 } as const;

/** The resource and scope every request of a worker repeats. */
export interface OtlpEnvelope {
  resource: Record<string, unknown>;
  scope: { name: string; version: string };
}

/** A length-delimited field: its tag, its length, its bytes. */
function field(tag: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(1 + varintSize(body.length) + body.length);
  out[0] = tag;
  out.set(body, writeVarint(out, 1, body.length));
  return out;
}

/** The envelope's constant fields: ResourceSpans.resource and ScopeSpans.scope. */
export function encodeEnvelope(envelope: OtlpEnvelope): { resource: Uint8Array; scope: Uint8Array } {
  const resource = new SpanWriter(256);
  resource.attributes(envelope.resource, RESOURCE_ATTRIBUTES);
  const scope = new SpanWriter(256);
  scope.string(SCOPE.name, envelope.scope.name);
  scope.string(SCOPE.version, envelope.scope.version);
  return { resource: field(RESOURCE_SPANS.resource, resource.copy()), scope: field(SCOPE_SPANS_SCOPE, scope.copy()) };
}

let scratch = [Buffer.allocUnsafe(1024 * 1024), Buffer.allocUnsafe(1024 * 1024)];
let next = 0;

/**
 * One ExportTraceServiceRequest of one ResourceSpans and one ScopeSpans holding every span of
 * `batches`. The bytes returned stay valid until the second call after this one: the request is
 * sent from a reused buffer (a new buffer per request cost more in page faults than the copy), and
 * the worker sends one request at a time, encoding the next only once the last is answered or
 * given up.
 */
export function encodeTraceRequest(batches: readonly Uint8Array[], envelope: ReturnType<typeof encodeEnvelope>): Uint8Array {
  let spans = 0;
  for (const batch of batches) spans += batch.length;
  const scopeSpans = envelope.scope.length + spans;
  const resourceSpans = envelope.resource.length + 1 + varintSize(scopeSpans) + scopeSpans;
  const total = 1 + varintSize(resourceSpans) + resourceSpans;
  if (scratch[next]!.length < total) scratch[next] = Buffer.allocUnsafe(Math.max(total, 2 * scratch[next]!.length));
  const buf = scratch[next]!;
  next = 1 - next;
  buf[0] = REQUEST_RESOURCE_SPANS;
  let pos = writeVarint(buf, 1, resourceSpans);
  buf.set(envelope.resource, pos);
  pos += envelope.resource.length;
  buf[pos++] = RESOURCE_SPANS.scopeSpans;
  pos = writeVarint(buf, pos, scopeSpans);
  buf.set(envelope.scope, pos);
  pos += envelope.scope.length;
  for (const batch of batches) {
    buf.set(batch, pos);
    pos += batch.length;
  }
  return buf.subarray(0, pos);
}
