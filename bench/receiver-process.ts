/**
 * A merchant server for the benchmarks, in its own process so it does not share an event loop
 * with what is measured. Paths: /ok answers 204 at once, /hang never answers. GET /stats returns
 * the count, first/last receipt times and publish-to-receipt latencies (from data.sentAt).
 */
import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? 0);
let count = 0;
let first = 0;
let last = 0;
let latencies: number[] = [];
const byMerchant = new Map<string, number[]>();

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/stats') {
    const merchants = Object.fromEntries([...byMerchant].map(([m, l]) => [m, l]));
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ count, first, last, latencies, merchants }));
    return;
  }
  if (req.method === 'POST' && req.url === '/reset') {
    count = 0;
    first = 0;
    last = 0;
    latencies = [];
    byMerchant.clear();
    res.writeHead(204).end();
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (req.url?.startsWith('/hang')) return; // the socket stays open until the client gives up
    const now = Date.now();
    count++;
    if (!first) first = now;
    last = now;
    try {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { data?: { sentAt?: number; benchMerchant?: string; warmup?: boolean } };
      if (typeof body.data?.sentAt === 'number' && !body.data.warmup) {
        latencies.push(now - body.data.sentAt);
        const merchant = body.data.benchMerchant ?? 'all';
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
