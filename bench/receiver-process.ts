/**
 * A merchant server for the benchmarks, in its own process so it does not share an event loop
 * with what is measured. Paths: /ok answers 204 at once, /hang never answers, /flaky answers 503 nine times in ten, /dead always 503,
 * /fail-first answers 500 to a tenth of first attempts (by webhook-id), then 204 to their retry. GET /stats returns
 * the count (of 2xx answers), first/last receipt times and publish-to-receipt latencies (from data.sentAt); GET
 * /count the same without the latencies but with `failed` (the 500s /fail-first answered), cheap enough to poll while a CPU figure is measured.
 * POST /watch {pid, at: [counts]} reads that process's CPU time (main thread and the others) at
 * the receipt of exactly those counts, so a window of deliveries is measured without polling.
 */
import { createServer, type IncomingMessage } from 'node:http';
import { threadCpuSeconds } from './cpu.js';

export interface Mark {
  count: number;
  /** ms, Date.now() scale with sub-millisecond precision */
  at: number;
  main: number;
  others: number;
}

const port = Number(process.argv[2] ?? 0);
let count = 0;
let failed = 0;
/** /fail-first: the webhook-ids answered 500, whose retry (the same webhook-id) is answered 204. */
const failedIds = new Set<string>();
let first = 0;
let last = 0;
let latencies: number[] = [];
const byMerchant = new Map<string, number[]>();
let watched: { pid: number; at: Set<number> } | undefined;
let marks: Mark[] = [];

function mark(): void {
  if (!watched?.at.has(count)) return;
  const at = performance.timeOrigin + performance.now();
  const cpu = threadCpuSeconds(watched.pid);
  marks.push({ count, at, main: cpu?.main ?? NaN, others: cpu?.others ?? NaN });
}

async function jsonBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/stats') {
    const merchants = Object.fromEntries([...byMerchant].map(([m, l]) => [m, l]));
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ count, first, last, latencies, merchants }));
    return;
  }
  if (req.method === 'GET' && req.url === '/count') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ count, first, last, marks, failed }));
    return;
  }
  if (req.method === 'POST' && req.url === '/reset') {
    count = 0;
    failed = 0;
    failedIds.clear();
    first = 0;
    last = 0;
    latencies = [];
    byMerchant.clear();
    watched = undefined;
    marks = [];
    res.writeHead(204).end();
    return;
  }
  if (req.method === 'POST' && req.url === '/watch') {
    void jsonBody(req).then((body) => {
      const { pid, at } = body as { pid: number; at: number[] };
      // A count already passed cannot be marked any more: say so rather than measure a shorter window.
      if (at.some((n) => n <= count)) return void res.writeHead(409).end(`count ${count} is past a mark`);
      watched = { pid, at: new Set(at) };
      marks = [];
      res.writeHead(204).end();
    });
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (req.url?.startsWith('/hang')) return; // the socket stays open until the client gives up
    // A dead merchant: every request answered 503.
    if (req.url?.startsWith('/dead')) return void res.writeHead(503).end();
    // A flaky merchant: nine requests in ten answered 503, not counted as received.
    if (req.url?.startsWith('/flaky') && Math.random() < 0.9) return void res.writeHead(503).end();
    if (req.url?.startsWith('/fail-first')) {
      const id = String(req.headers['webhook-id']);
      if (!failedIds.delete(id) && Math.random() < 0.1) {
        failedIds.add(id);
        failed++;
        return void res.writeHead(500).end();
      }
    }
    const now = Date.now();
    count++;
    if (!first) first = now;
    last = now;
    mark();
    try {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { data?: { sentAt?: number; benchMerchant?: string; warmup?: boolean } };
      if (typeof body.data?.sentAt === 'number' && !body.data.warmup) {
        latencies.push(now - body.data.sentAt);
        // Per endpoint where a merchant has several (/ep1, /ep2 …: bench/fanout-dead.ts), else per merchant.
        const merchant = (body.data.benchMerchant ?? 'all') + (req.url?.startsWith('/ep') ? req.url : '');
        if (!byMerchant.has(merchant)) byMerchant.set(merchant, []);
        byMerchant.get(merchant)!.push(now - body.data.sentAt);
      }
    } catch {
      // raw HTTP benchmark bodies carry no timestamp
    }
    res.writeHead(204).end();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => {
  const address = server.address();
  process.send?.({ port: typeof address === 'object' && address ? address.port : port });
});
