import { Webhook } from 'standardwebhooks';
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { waitFor } from './wait.js';

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

/** What the merchant does with request number `n` (0-based): answer a status (with headers), or never answer. */
export type Behaviour = (
  n: number,
  req: ReceivedRequest,
) => number | 'hang' | { status: number; headers?: Record<string, string>; delayMs?: number };

/** A merchant that answers 500 to the first attempt of each webhook (by webhook-id) and 204 after. */
export function failOnceThenSucceed(): Behaviour {
  const seen = new Set<string>();
  return (_n, req) => {
    const id = String(req.headers['webhook-id']);
    if (seen.has(id)) return 204;
    seen.add(id);
    return 500;
  };
}

/** A real merchant server on loopback that records every request. */
export class Receiver {
  readonly requests: ReceivedRequest[] = [];
  private readonly hanging = new Set<ServerResponse>();

  private constructor(private readonly server: Server, readonly url: string) {}

  static async start(behaviour: Behaviour = () => 200): Promise<Receiver> {
    let receiver!: Receiver;
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const request: ReceivedRequest = {
          method: req.method ?? '',
          path: req.url ?? '',
          headers: req.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          at: Date.now(),
        };
        const n = receiver.requests.length;
        receiver.requests.push(request);
        const answer = behaviour(n, request);
        if (answer === 'hang') {
          receiver.hanging.add(res);
          // Held only while the client waits: a request it gave up on is no longer in flight.
          res.on('close', () => receiver.hanging.delete(res));
          return;
        }
        const { status, headers, delayMs } = typeof answer === 'number' ? { status: answer, headers: {}, delayMs: 0 } : answer;
        const reply = () => res.writeHead(status, { 'content-type': 'text/plain', ...headers }).end('ok');
        if (delayMs) {
          receiver.hanging.add(res);
          setTimeout(() => {
            receiver.hanging.delete(res);
            // answerHeld() may have answered it already.
            if (!res.destroyed && !res.writableEnded) reply();
          }, delayMs);
        } else reply();
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    receiver = new Receiver(server, `http://127.0.0.1:${port}/webhooks`);
    return receiver;
  }

  /** Requests held open now ('hang', or a delayed answer not yet sent). */
  get held(): number {
    return this.hanging.size;
  }

  /** Answers every request held open with `status`. */
  answerHeld(status = 204): void {
    for (const res of this.hanging) if (!res.destroyed) res.writeHead(status, { 'content-type': 'text/plain' }).end('ok');
    this.hanging.clear();
  }

  waitForRequests(count: number, timeoutMs = 10_000): Promise<ReceivedRequest[]> {
    return waitFor(`${count} request(s) at ${this.url}`, () => this.requests.length >= count && this.requests, timeoutMs);
  }

  async close(): Promise<void> {
    for (const res of this.hanging) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** A loopback port nothing listens on: one that was just bound and released. */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A URL where nothing listens. */
export async function refusedUrl(): Promise<string> {
  return `http://127.0.0.1:${await freePort()}/webhooks`;
}

/** Whether a webhook as received verifies with `secret` (Standard Webhooks: id, timestamp, signatures). */
export function verifies(secret: string, request: { body: string; headers: Record<string, unknown> }): boolean {
  try {
    new Webhook(secret).verify(request.body, request.headers as Record<string, string>);
    return true;
  } catch {
    return false;
  }
}
