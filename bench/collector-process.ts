/**
 * A local OTLP/HTTP collector stub for the tracing benchmark, in its own process: it answers
 * every POST /v1/traces at once (200, an empty ExportTraceServiceResponse) and counts the
 * requests and the spans in them, decoding just enough of the protobuf wire format (or the JSON)
 * to count. GET /stats returns the counts; POST /reset zeroes them.
 */
import { createServer } from 'node:http';

/**
 * Calls `each` with the start and end of every length-delimited field numbered `wanted` of the
 * protobuf message in buf[start, end). Offsets, not subarrays: at tens of thousands of spans a
 * second the stub's own garbage would take CPU from the dispatcher it shares the machine with.
 */
function fields(buf: Buffer, start: number, end: number, wanted: number, each: (start: number, end: number) => void): void {
  let i = start;
  const varint = (): number => {
    let value = 0;
    let scale = 1;
    for (;;) {
      const byte = buf[i++]!;
      value += (byte & 0x7f) * scale;
      scale *= 128;
      if (byte < 0x80) return value;
    }
  };
  while (i < end) {
    const key = varint();
    const field = Math.floor(key / 8);
    const type = key % 8;
    if (type === 0) varint();
    else if (type === 1) i += 8;
    else if (type === 5) i += 4;
    else if (type === 2) {
      const length = varint();
      if (field === wanted) each(i, i + length);
      i += length;
    } else throw new Error(`wire type ${type}`);
  }
}

/** ExportTraceServiceRequest.resource_spans(1) → ResourceSpans.scope_spans(2) → ScopeSpans.spans(2). */
function countProtobuf(body: Buffer): number {
  let spans = 0;
  const span = () => void spans++;
  fields(body, 0, body.length, 1, (a, b) => fields(body, a, b, 2, (c, d) => fields(body, c, d, 2, span)));
  return spans;
}

function countJson(body: Buffer): number {
  const request = JSON.parse(body.toString('utf8')) as { resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: unknown[] }> }> };
  let spans = 0;
  for (const resource of request.resourceSpans ?? []) for (const scope of resource.scopeSpans ?? []) spans += scope.spans?.length ?? 0;
  return spans;
}

let requests = 0;
let spans = 0;
let bytes = 0;

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/stats') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ requests, spans, bytes }));
    return;
  }
  if (req.method === 'POST' && req.url === '/reset') {
    requests = spans = bytes = 0;
    res.writeHead(204).end();
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const json = String(req.headers['content-type'] ?? '').includes('json');
    requests++;
    bytes += body.length;
    spans += json ? countJson(body) : countProtobuf(body);
    res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' }).end(json ? '{}' : '');
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.send?.({ port: typeof address === 'object' && address ? address.port : 0 });
});
