import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createUndiciClient } from '../../libs/http/index.js';

describe('the undici client keeping the first bytes of a response for the delivery log', () => {
  let server: http.Server;
  let url: string;

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      req.resume();
      const size = Number(new URL(req.url!, 'http://x').searchParams.get('size'));
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('x'.repeat(size));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const post = (client: ReturnType<typeof createUndiciClient>, size: number) =>
    client.post({ url: `${url}/?size=${size}`, headers: { 'content-type': 'application/json' }, body: '{}', timeoutMs: 2_000 });

  it('returns at most responseBodyBytes of the body, and the whole of a shorter one', async () => {
    const client = createUndiciClient({ allowPrivateTargets: true, responseBodyBytes: 16 });
    try {
      expect((await post(client, 100_000)).body).toBe('x'.repeat(16));
      expect((await post(client, 5)).body).toBe('xxxxx');
      expect((await post(client, 0)).body).toBe('');
      // A long body does not break the next request on the same connection.
      expect((await post(client, 3)).status).toBe(500);
    } finally {
      client.close();
    }
  });

  it('keeps no body when not asked to', async () => {
    const client = createUndiciClient({ allowPrivateTargets: true });
    try {
      const response = await post(client, 100);
      expect(response.status).toBe(500);
      expect(response.body).toBeUndefined();
    } finally {
      client.close();
    }
  });
});
