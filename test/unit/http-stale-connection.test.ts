import { once } from 'node:events';
import http from 'node:http';
import net, { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { createUndiciClient, WebhookNetworkError, WebhookTimeoutError } from '../../libs/http/index.js';

/** What the merchant does with request `n` (0-based) of connection `c` (0-based). */
type Move = 'answer' | 'reset-unread' | 'reset-after-head-byte';

/**
 * A merchant that speaks just enough HTTP/1.1 to keep connections alive, and can reset one under
 * a request it has not read: what a server's keep-alive timeout does when it fires as the client
 * writes a request on the idle connection. `read` counts the requests its application saw.
 */
class Merchant {
  connections = 0;
  read = 0;
  private readonly sockets = new Set<net.Socket>();
  private server!: net.Server;
  url = '';

  constructor(private readonly move: (c: number, n: number) => Move) {}

  async start(): Promise<void> {
    this.server = net.createServer((socket) => {
      const c = this.connections++;
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
      socket.on('error', () => {});
      let n = 0;
      let buffered = Buffer.alloc(0);
      socket.on('data', (chunk: Buffer) => {
        buffered = Buffer.concat([buffered, chunk]);
        for (;;) {
          const end = buffered.indexOf('\r\n\r\n');
          if (end < 0) return;
          const length = Number(/content-length: *(\d+)/i.exec(buffered.subarray(0, end).toString('latin1'))?.[1] ?? 0);
          if (buffered.length < end + 4 + length) return;
          buffered = buffered.subarray(end + 4 + length);
          const move = this.move(c, n++);
          if (move === 'reset-unread') return void socket.resetAndDestroy();
          this.read++;
          if (move === 'reset-after-head-byte') {
            socket.write('H');
            setTimeout(() => socket.resetAndDestroy(), 50);
            return;
          }
          socket.write('HTTP/1.1 204 No Content\r\nconnection: keep-alive\r\nkeep-alive: timeout=60\r\n\r\n');
        }
      });
    });
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/webhooks`;
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * A POST on a kept-alive connection the merchant closes under it, before it read the request,
 * goes again once on a new connection, inside the same post(): the dispatcher sees one attempt,
 * the merchant's answer to the retry. Nothing else is retried.
 */
describe('the undici client and a kept-alive connection reset under a request', () => {
  let merchant: Merchant | undefined;
  let client: ReturnType<typeof createUndiciClient> | undefined;

  afterEach(async () => {
    client?.close();
    await merchant?.close();
  });

  async function setUp(move: (c: number, n: number) => Move) {
    merchant = new Merchant(move);
    await merchant.start();
    // One connection per origin: a second POST right after an answer would otherwise go out on a
    // new connection (undici holds a connection busy until the answer's end is processed).
    client = createUndiciClient({ allowPrivateTargets: true, connectionsPerOrigin: 1 });
    const m = merchant;
    const post = () => client!.post({ url: m.url, headers: { 'content-type': 'application/json', 'webhook-id': 'msg_1' }, body: '{"a":1}', timeoutMs: 5_000 });
    return { m, post };
  }

  it('sends the request again, once, on a new connection when the reused one is reset before any answer', async () => {
    const { m, post } = await setUp((c, n) => (c === 0 && n === 1 ? 'reset-unread' : 'answer'));
    expect((await post()).status).toBe(204);
    expect((await post()).status).toBe(204);
    // The first connection read one request; the second connection carried the retry.
    expect({ connections: m.connections, read: m.read }).toEqual({ connections: 2, read: 2 });
  });

  it('retries only once: a retry reset on its new connection fails the attempt', async () => {
    const { m, post } = await setUp((c, n) => (c === 0 && n === 0 ? 'answer' : 'reset-unread'));
    expect((await post()).status).toBe(204);
    const err = await post().then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(WebhookNetworkError);
    expect(m.connections).toBe(2);
  });

  it('does not retry on a new connection reset under its first request', async () => {
    const { m, post } = await setUp(() => 'reset-unread');
    const err = await post().then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(WebhookNetworkError);
    expect((err as WebhookNetworkError).code).toBe('ECONNRESET');
    expect(m.connections).toBe(1);
  });

  it('does not retry once a byte of the answer came', async () => {
    const { m, post } = await setUp((c, n) => (c === 0 && n === 1 ? 'reset-after-head-byte' : 'answer'));
    expect((await post()).status).toBe(204);
    const err = await post().then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(WebhookNetworkError);
    expect({ connections: m.connections, read: m.read }).toEqual({ connections: 1, read: 2 });
  });
});

/** What a merchant's server can make the dispatcher hold open: neither an idle connection past the cap, nor one still opening past the attempt. */
describe("connections a merchant's server would keep", () => {
  const closedWithin = async (closed: Promise<unknown>, ms: number) =>
    Promise.race([closed.then(() => 'closed'), new Promise((resolve) => setTimeout(() => resolve('still open'), ms))]);

  it("keeps an idle connection no longer than the cap, whatever the server's Keep-Alive hint", async () => {
    let socketClosed: Promise<unknown> = new Promise(() => {});
    const server = http.createServer((req, res) => {
      req.resume();
      res.writeHead(204, { 'keep-alive': 'timeout=600' }).end();
    });
    server.on('connection', (socket) => (socketClosed = once(socket, 'close')));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const client = createUndiciClient({ allowPrivateTargets: true, idleMs: 300 });
    try {
      const { port } = server.address() as AddressInfo;
      expect((await client.post({ url: `http://127.0.0.1:${port}/`, headers: { 'content-type': 'application/json' }, body: '{}', timeoutMs: 2_000 })).status).toBe(204);
      expect(await closedWithin(socketClosed, 3_000)).toBe('closed');
    } finally {
      client.close();
      server.closeAllConnections();
      server.close();
    }
  });

  it('gives up a connection whose TLS never completes at the attempt deadline, not undici\'s 10 s', async () => {
    let socketClosed: Promise<unknown> = new Promise(() => {});
    // Accepts, then says nothing: a TLS handshake that never ends.
    const server = createServer((socket) => {
      socket.on('error', () => {});
      // Read (the ClientHello), so that the client's close is seen.
      socket.resume();
      socketClosed = once(socket, 'close');
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const client = createUndiciClient({ allowPrivateTargets: true, connectTimeoutMs: 500 });
    try {
      const { port } = server.address() as AddressInfo;
      await expect(client.post({ url: `https://127.0.0.1:${port}/`, headers: { 'content-type': 'application/json' }, body: '{}', timeoutMs: 500 })).rejects.toBeInstanceOf(WebhookTimeoutError);
      expect(await closedWithin(socketClosed, 3_000)).toBe('closed');
    } finally {
      client.close();
      server.close();
    }
  });
});

/** docs/receiving.md: an unasked-for 100 Continue is a broken answer; other 1xx answers are passed over. */
describe('informational answers before the final one', () => {
  const answering = async (informational: string) => {
    const server = createServer((socket) => {
      socket.on('error', () => {});
      socket.once('data', () => socket.write(`${informational}HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n`));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const client = createUndiciClient({ allowPrivateTargets: true });
    try {
      const { port } = server.address() as AddressInfo;
      return await client.post({ url: `http://127.0.0.1:${port}/`, headers: { 'content-type': 'application/json' }, body: '{}', timeoutMs: 2_000 }).then(
        (answer) => answer.status,
        (err: { errorClass?: string }) => err.errorClass,
      );
    } finally {
      client.close();
      server.close();
    }
  };

  it('passes over 102 and 103, and takes an unasked-for 100 as a network error', async () => {
    expect(await answering('HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n')).toBe(204);
    expect(await answering('HTTP/1.1 102 Processing\r\n\r\n')).toBe(204);
    expect(await answering('HTTP/1.1 100 Continue\r\n\r\n')).toBe('network_error');
  });
});
