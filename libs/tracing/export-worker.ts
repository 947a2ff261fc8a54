/**
 * The export worker: a thread of its own that takes a program's ended spans (span-records.ts:
 * already OTLP/protobuf Spans, their bytes transferred to it) and sends them with the SDK's
 * OTLP/HTTP export delegate (its retries, timeouts, headers and TLS from the
 * OTEL_EXPORTER_OTLP_* variables). The program's own thread, the dispatcher's above all, only
 * writes its spans. An http/protobuf request is its envelope and the spans' bytes as they are
 * (otlp-protobuf.ts); http/json reads the spans back into the SDK's and uses its JSON serializer.
 *
 * Spans wait here in batches, at most MAX_WAITING of them (the rest are dropped and counted), and
 * go out one request at a time, at most MAX_REQUEST spans each, gathered into requests of
 * GATHER_SPANS or GATHER_MS.
 *
 * Messages in: a SpanBatch { spans, buffer, length } per batch (its buffer transferred),
 * { type: 'flush', id }, { type: 'shutdown' }. Messages out:
 * { type: 'took' } per batch, { type: 'spent', buffers } giving back the buffers of a request
 * once sent (or of batches dropped), { type: 'flushed', id }, { type: 'shut' }, and
 * { type: 'diag', message } for what the program should log.
 */
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { diag, DiagLogLevel } from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import { OTLPExporterBase } from '@opentelemetry/otlp-exporter-base';
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { encodeEnvelope, encodeTraceRequest } from './otlp-protobuf.js';
import { readableSpan } from './readable-span.js';
import { readSpanRecords, type SpanBatch } from './span-records.js';

export interface ExportWorkerSettings {
  url: string;
  protocol: 'http/protobuf' | 'http/json';
  serviceName: string;
  resourceAttributes: Record<string, string>;
  exportTimeoutMs?: number;
  scope: { name: string; version: string };
}

type Request = { batches: Uint8Array[]; spans: number };

const MAX_WAITING = 16_384;
const MAX_REQUEST = 8_192;
/**
 * A request waits until this many spans are waiting, or the oldest has waited this long: a
 * request costs this thread about a millisecond whatever it holds (Node's HTTP client, run too
 * seldom to be optimised) and the collector its own per-request work, where a span costs them
 * well under a microsecond. Requests of 8,192 spans (about 3 MB of the dispatcher's) instead of
 * about 2,400 cut both by about a third per span (BENCHMARKS.md section 14); the OpenTelemetry
 * Collector takes request bodies of up to 20 MiB by default.
 */
const GATHER_SPANS = 8_192;
const GATHER_MS = 500;
/**
 * A request's spans also stop at this many bytes of protobuf (a batch larger alone still goes
 * alone): 8,192 of the dispatcher's spans are about 3 MB, well under the 4 MiB a gRPC-minded
 * backend may take, and http/json writes about three times the bytes.
 */
const MAX_REQUEST_BYTES = { protobuf: 4 * 1024 * 1024 - 64 * 1024, json: 1536 * 1024 } as const;
const WARNING_EVERY_MS = 60_000;

const port = parentPort!;

/**
 * This thread runs at a lower priority (nice 10): exporting can wait, deliveries cannot. On a busy
 * host it takes mostly the CPU the program's thread leaves idle, and under contention still about
 * a tenth of the program's share, about what exporting every span needs; what it cannot export in
 * time is dropped and counted (below), never deliveries slowed. Only on Linux, where
 * setpriority on the calling task changes this thread alone; elsewhere it would change the whole
 * process.
 */
if (process.platform === 'linux') {
  try {
    setPriority(10);
  } catch {
    // Not allowed here (a seccomp profile): the thread keeps the program's priority.
  }
}
const settings = workerData as ExportWorkerSettings;
const warnings = new Map<string, number>();

/** A warning for the program's log, at most once a minute per message. */
function warn(message: string, detail: string): void {
  const now = Date.now();
  if (now - (warnings.get(message) ?? -Infinity) < WARNING_EVERY_MS) return;
  warnings.set(message, now);
  port.postMessage({ type: 'diag', message: `${message}: ${detail}`.slice(0, 300) });
}

diag.setLogger(
  {
    error: (message) => warn('exporter error', String(message)),
    warn: (message) => warn('exporter warning', String(message)),
    info: () => {},
    debug: () => {},
    verbose: () => {},
  },
  DiagLogLevel.WARN,
);

const resource = defaultResource().merge(resourceFromAttributes({ ...settings.resourceAttributes, 'service.name': settings.serviceName }));
const envelope = encodeEnvelope({ resource: resource.attributes, scope: settings.scope });
const json = settings.protocol === 'http/json';
const maxRequestBytes = json ? MAX_REQUEST_BYTES.json : MAX_REQUEST_BYTES.protobuf;

const serializer = json
  ? {
      serializeRequest: (request: Request) => JsonTraceSerializer.serializeRequest(readableSpans(request)),
      deserializeResponse: (data: Uint8Array) => JsonTraceSerializer.deserializeResponse(data),
    }
  : {
      serializeRequest: (request: Request) => encodeTraceRequest(request.batches, envelope),
      deserializeResponse: (data: Uint8Array) => ProtobufTraceSerializer.deserializeResponse(data),
    };

const exporter = new OTLPExporterBase<Request>(
  createOtlpHttpExportDelegate(
    convertLegacyHttpOptions({ url: settings.url, ...(settings.exportTimeoutMs ? { timeoutMillis: settings.exportTimeoutMs } : {}) }, 'TRACES', 'v1/traces', {
      'Content-Type': json ? 'application/json' : 'application/x-protobuf',
    }),
    serializer,
    'otlp_http_span_exporter',
    { name: 'span', countItems: (request: Request) => request.spans },
    undefined,
  ),
);

const waiting: Array<SpanBatch & { at: number }> = [];
let waitingSpans = 0;
let waitingBytes = 0;
let exporting = false;
let flushes: Array<() => void> = [];
let gathering: NodeJS.Timeout | undefined;

function take(batch: SpanBatch): void {
  if (waitingSpans + batch.spans > MAX_WAITING) {
    warn('spans dropped', `more than ${MAX_WAITING} waiting to be exported (the collector is slow or down)`);
    spent([batch.buffer]);
    return;
  }
  waiting.push({ ...batch, at: performance.now() });
  waitingSpans += batch.spans;
  waitingBytes += batch.length;
  pump();
}

function pump(): void {
  if (exporting) return;
  if (waiting.length === 0) {
    for (const resolve of flushes) resolve();
    flushes = [];
    return;
  }
  const waited = performance.now() - waiting[0]!.at;
  if (waitingSpans < GATHER_SPANS && waitingBytes < maxRequestBytes && waited < GATHER_MS && flushes.length === 0) {
    gathering ??= setTimeout(() => {
      gathering = undefined;
      pump();
    }, GATHER_MS - waited);
    return;
  }
  clearTimeout(gathering);
  gathering = undefined;
  const request: Request = { batches: [], spans: 0 };
  let bytes = 0;
  while (waiting.length > 0 && (request.spans === 0 || (request.spans + waiting[0]!.spans <= MAX_REQUEST && bytes + waiting[0]!.length <= maxRequestBytes))) {
    const batch = waiting.shift()!;
    request.batches.push(new Uint8Array(batch.buffer, 0, batch.length));
    request.spans += batch.spans;
    bytes += batch.length;
  }
  waitingSpans -= request.spans;
  waitingBytes -= bytes;
  exporting = true;
  exporter.export(request, (result) => {
    exporting = false;
    spent(request.batches.map((batch) => batch.buffer as ArrayBuffer));
    if (result.code !== ExportResultCode.SUCCESS) warn('export failed', String(result.error?.message ?? result.error));
    pump();
  });
}

/** The program writes its next batches into these buffers again, instead of new ones. */
function spent(buffers: ArrayBuffer[]): void {
  port.postMessage({ type: 'spent', buffers }, buffers);
}

/** Resolves once every span taken so far has been exported (or given up on). */
function drained(): Promise<void> {
  if (!exporting && waiting.length === 0) return Promise.resolve();
  const done = new Promise<void>((resolve) => flushes.push(resolve));
  // Spans still gathering for a request go now.
  pump();
  return done;
}

/** The SDK's spans for its JSON serializer. */
function readableSpans(request: Request): ReadableSpan[] {
  const spans: ReadableSpan[] = [];
  for (const batch of request.batches) readSpanRecords(batch, (span) => spans.push(readableSpan(span, resource, settings.scope)));
  return spans;
}

port.on('message', (message: SpanBatch | { type: 'flush'; id: number } | { type: 'shutdown' }) => {
  if (!('type' in message)) {
    take(message);
    port.postMessage({ type: 'took' });
    return;
  }
  if (message.type === 'flush') {
    const { id } = message;
    void drained().then(() => port.postMessage({ type: 'flushed', id }));
    return;
  }
  if (message.type === 'shutdown') {
    void drained()
      .then(() => exporter.shutdown())
      .catch(() => {})
      .then(() => {
        port.postMessage({ type: 'shut' });
        // Ends this thread only; the exporter's keep-alive sockets would hold it open.
        process.exit(0);
      });
  }
});
