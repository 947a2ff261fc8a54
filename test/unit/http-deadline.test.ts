import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createUndiciClient, WebhookTimeoutError } from '../../libs/http/index.js';
import { type Deadlined, Deadlines } from '../../libs/http/deadlines.js';
import { waitFor } from '../support/wait.js';

/**
 * The whole attempt's deadline, now one shared timer rather than one per request: it must still
 * cut a merchant off where it hangs (before the head, or while kept body bytes are read), to
 * the millisecond scale of a per-request timer, and not touch the requests that answer.
 */
describe('the undici client deadline', () => {
  let server: http.Server;
  let url: string;
  const open = new Set<http.ServerResponse>();

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      req.resume();
      const path = req.url ?? '';
      if (path.startsWith('/hang')) return void open.add(res);
      if (path.startsWith('/slow-body')) {
        open.add(res);
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('first bytes');
        return;
      }
      res.writeHead(204).end();
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    for (const res of open) res.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  const post = (client: ReturnType<typeof createUndiciClient>, path: string, timeoutMs: number) =>
    client.post({ url: `${url}${path}`, headers: { 'content-type': 'application/json' }, body: '{}', timeoutMs });

  it('cuts off a merchant that never answers at the deadline, and the others answer meanwhile', async () => {
    const client = createUndiciClient({ allowPrivateTargets: true });
    // One deadline for all: the hanging two are cut off at it, the twenty others answer before it.
    // 2 s, not 300 ms: with the test files in parallel on a 2-core machine, twenty connections
    // opened at once sometimes took over 300 ms to answer, and one of them was cut off.
    const deadlineMs = 2_000;
    try {
      const started = performance.now();
      const hanging = [post(client, '/hang/1', deadlineMs), post(client, '/hang/2', deadlineMs)].map((p) =>
        p.then(
          () => ({ err: undefined as unknown, ms: NaN }),
          (err: unknown) => ({ err, ms: performance.now() - started }),
        ),
      );
      const fast = await Promise.all(Array.from({ length: 20 }, () => post(client, '/ok', deadlineMs)));
      expect(fast.every((r) => r.status === 204)).toBe(true);
      for (const outcome of await Promise.all(hanging)) {
        expect(outcome.err).toBeInstanceOf(WebhookTimeoutError);
        expect((outcome.err as Error).message).toBe(`timeout after ${deadlineMs} ms`);
        expect(outcome.ms).toBeGreaterThanOrEqual(deadlineMs - 5);
        expect(outcome.ms).toBeLessThan(deadlineMs + 700);
      }
    } finally {
      client.close();
    }
  });

  it('holds the deadline while kept body bytes are read: the answer stands, without a body', async () => {
    const client = createUndiciClient({ allowPrivateTargets: true, responseBodyBytes: 64 });
    try {
      const started = performance.now();
      // 2 s, not 300 ms: in CI the head itself once came later than 300 ms, and the attempt timed out.
      const response = await post(client, '/slow-body', 2_000);
      const ms = performance.now() - started;
      expect(response.status).toBe(200);
      expect(response.body).toBe('');
      expect(ms).toBeGreaterThanOrEqual(1_995);
      // The body never ends: without the deadline this never answers. A loaded machine stalled past 1 s here.
      expect(ms).toBeLessThan(5_000);
    } finally {
      client.close();
    }
  });

  it('each attempt has its own deadline, whatever its timeout', async () => {
    const client = createUndiciClient({ allowPrivateTargets: true });
    try {
      const started = performance.now();
      const times = await Promise.all(
        // Far apart, so that a stall of a loaded machine (1.5 s seen in CI) cannot make the short one
        // look as late as the long one: with a deadline shared, both end at 150 ms or both at 2 s.
        [2_000, 150].map((timeoutMs) =>
          post(client, '/hang', timeoutMs).then(
            () => NaN,
            () => performance.now() - started,
          ),
        ),
      );
      expect(times[1]).toBeGreaterThanOrEqual(145);
      expect(times[1]).toBeLessThan(1_500);
      expect(times[0]).toBeGreaterThanOrEqual(1_995);
    } finally {
      client.close();
    }
  });
});

describe('Deadlines', () => {
  const item = (log: string[], name: string): Deadlined => ({ deadline: 0, newer: undefined, older: undefined, expire: () => log.push(name) });

  it('expires what is due in deadline order, not what was removed', async () => {
    const deadlines = new Deadlines();
    const log: string[] = [];
    const a = item(log, 'a');
    const b = item(log, 'b');
    const c = item(log, 'c');
    const d = item(log, 'd');
    // 200 ms apart: a loaded machine may pause the process between two adds (20 ms apart, a pause
    // of 25 ms made a's deadline come before c's, in CI).
    deadlines.add(a, 600);
    deadlines.add(b, 200);
    deadlines.add(c, 400);
    deadlines.add(d, 300);
    deadlines.remove(d);
    deadlines.remove(d);
    // d, removed, would have expired before a: by a's expiry the log is whole.
    await waitFor('a expired', () => log.includes('a'), 5_000, 20);
    expect(log).toEqual(['b', 'c', 'a']);
    deadlines.close();
  });
});
