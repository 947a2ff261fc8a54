import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

/** A metrics port: Prometheus metrics, liveness and readiness, for health checks and load balancers' drains. */
export async function startHealthServer(options: {
  port: number;
  registry: Registry;
  ready: () => boolean;
  /** Named in /readyz's answer while not ready: what the program is waiting for. */
  waitingFor?: () => string | undefined;
  /** Why, when there is more to say (the schema version, and the command to run). */
  detail?: () => string | undefined;
}) {
  // Not ready from the stop's first moment: a program draining takes nothing new.
  let stopping = false;
  const server = createServer((req, res) => {
    if (req.method !== 'GET') return void res.writeHead(405, { allow: 'GET' }).end();
    if (req.url === '/healthz') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
    if (req.url === '/readyz') {
      const ready = !stopping && options.ready();
      const notReady = stopping ? { status: 'not ready', stopping: true } : { status: 'not ready', waitingFor: options.waitingFor?.(), detail: options.detail?.() };
      return void res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify(ready ? { status: 'ready' } : notReady));
    }
    if (req.url === '/metrics') {
      options.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': options.registry.contentType }).end(text),
        () => res.writeHead(500).end(),
      );
      return;
    }
    res.writeHead(404).end();
  });
  server.listen(options.port);
  await once(server, 'listening');
  return {
    port: (server.address() as AddressInfo).port,
    /** The stop began: /readyz answers 503 `stopping` while the port still serves, through the drain. */
    stopping: () => {
      stopping = true;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
