import { once } from 'node:events';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { waitFor } from '../support/wait.js';

/**
 * Platforms host many merchants' webhooks on one origin. One merchant there whose path hangs, or
 * answers at once and then trickles its body, must not hold back the others at that origin: the
 * dispatcher's guards give each endpoint a share of DISPATCH_CONCURRENCY, and nothing under them
 * may be a smaller bulkhead shared by the whole origin (undici's connections per origin were one).
 */
class SharedOrigin {
  /** Webhooks received per path, and when. */
  readonly arrivals = new Map<string, number[]>();
  private readonly sockets = new Set<Socket>();
  private readonly held = new Set<ServerResponse>();

  private constructor(private readonly server: Server, readonly url: string) {}

  static async start(): Promise<SharedOrigin> {
    let origin!: SharedOrigin;
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const path = req.url ?? '';
        origin.arrivals.set(path, [...(origin.arrivals.get(path) ?? []), Date.now()]);
        if (path === '/ok') return void res.writeHead(204).end();
        origin.held.add(res);
        res.on('close', () => origin.held.delete(res));
        if (path === '/hang') return;
        // A 200 at once, then a byte every 200 ms: 64 KiB would take hours.
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.flushHeaders();
        const drip = setInterval(() => res.write('.'), 200);
        res.on('close', () => clearInterval(drip));
      });
    });
    server.keepAliveTimeout = 60_000;
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    origin = new SharedOrigin(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    server.on('connection', (socket: Socket) => {
      origin.sockets.add(socket);
      socket.on('close', () => origin.sockets.delete(socket));
    });
    return origin;
  }

  /** Connections the dispatcher holds open to this origin now. */
  get connections(): number {
    return this.sockets.size;
  }

  /** Requests held open now (hanging, or trickling their body). */
  get holding(): number {
    return this.held.size;
  }

  received(path: string): number {
    return this.arrivals.get(path)?.length ?? 0;
  }

  async close(): Promise<void> {
    for (const res of this.held) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

describe('a merchant whose server answers at once and trickles its body, beside another on the same origin', () => {
  let origin: SharedOrigin;
  let harness: Harness;
  const trickler = testMerchant('m_origin_drip', 'http://placeholder');
  const shop = testMerchant('m_origin_drip_shop', 'http://placeholder');

  beforeAll(async () => {
    origin = await SharedOrigin.start();
    trickler.endpoints[0]!.url = `${origin.url}/drip`;
    shop.endpoints[0]!.url = `${origin.url}/ok`;
    // No delivery log (DELIVERY_LOG=off): no body bytes kept, the client's path that answered at the head.
    harness = await startHarness({ name: 'origin-drip', merchants: [trickler, shop], retryDelaysMs: [60_000], settings: { concurrency: 16, deliveryTimeoutMs: 2_000 } });
  });

  afterAll(async () => {
    await origin?.close();
    await harness?.close();
  });

  it("holds no more connections to it than its share of requests, and the shop's webhook goes at once", async () => {
    await Promise.all(Array.from({ length: 300 }, () => harness.publisher.publish(sampleEvent('payout', trickler.id))));
    await waitFor('the trickler receiving', () => origin.received('/drip') >= 8, 10_000);
    const published = Date.now();
    await harness.publisher.publish(sampleEvent('payout', shop.id));
    // Its share is 8 of the 16 requests in flight; each trickling body, read to the deadline at most,
    // is one of them (twice that for connections the server has not seen closed yet). Read to its
    // end outside the guards, every one of the 300 held a connection, and the shop's never went.
    let most = 0;
    await waitFor("the shop's webhook", () => {
      most = Math.max(most, origin.connections);
      return origin.received('/ok') >= 1;
    }, 15_000);
    expect(origin.arrivals.get('/ok')![0]! - published).toBeLessThan(8_000);
    expect(most).toBeLessThanOrEqual(32);
    expect(origin.holding).toBeLessThanOrEqual(16);
  }, 30_000);
});

describe('a merchant whose path hangs, its share of DISPATCH_CONCURRENCY over 256, beside another on the same origin', () => {
  let origin: SharedOrigin;
  let harness: Harness;
  const hanging = testMerchant('m_origin_hang', 'http://placeholder');
  const shop = testMerchant('m_origin_hang_shop', 'http://placeholder');

  beforeAll(async () => {
    origin = await SharedOrigin.start();
    hanging.endpoints[0]!.url = `${origin.url}/hang`;
    shop.endpoints[0]!.url = `${origin.url}/ok`;
    // 600: a share of 300 for one endpoint, as DISPATCH_CONCURRENCY (up to 10,000) allows.
    harness = await startHarness({ name: 'origin-hang', merchants: [hanging, shop], retryDelaysMs: [60_000], settings: { concurrency: 600, deliveryTimeoutMs: 20_000 } });
  });

  afterAll(async () => {
    await origin?.close();
    await harness?.close();
  });

  it("sends the shop's webhook at once while 280 of the other's hang", async () => {
    await Promise.all(Array.from({ length: 280 }, () => harness.publisher.publish(sampleEvent('payout', hanging.id))));
    // As many as undici's pool for the origin held: the rest of the 280 waited there for one of them.
    await waitFor('the hanging endpoint holding 256 requests', () => origin.holding >= 256, 10_000);
    const published = Date.now();
    await harness.publisher.publish(sampleEvent('payout', shop.id));
    // Queued behind the others in undici, it went once the first of them timed out (20 s).
    await waitFor("the shop's webhook", () => origin.received('/ok') >= 1, 25_000);
    expect(origin.arrivals.get('/ok')![0]! - published).toBeLessThan(6_000);
  }, 60_000);
});
