import { createServer, type Server } from 'node:http';
import { Webhook } from 'standardwebhooks';
import type { Logger } from '../../libs/logger/index.js';

/** A merchant's server for demos that verifies and logs webhooks; `POST /down` makes it answer 503 until `POST /up`. */
export function createDemoReceiver(options: { secret: string; logger: Logger; secretsByPath?: Record<string, string> }): Server {
  // A webhook is verified with the secret of the path it came to (`secret` for any other path).
  const fallback = new Webhook(options.secret);
  const byPath = new Map(Object.entries(options.secretsByPath ?? {}).map(([path, secret]) => [path, new Webhook(secret)]));
  let down = false;
  return createServer((req, res) => {
    // Process up, whatever /down says: the outage is the merchant's, not the container's.
    if (req.method === 'GET' && req.url === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      return;
    }
    if (req.method === 'POST' && (req.url === '/down' || req.url === '/up')) {
      down = req.url === '/down';
      options.logger.info(down ? 'demo merchant is down: answering 503' : 'demo merchant is up again');
      res.writeHead(204).end();
      return;
    }
    if (down) {
      options.logger.info('demo merchant refused a webhook: down', { webhookId: req.headers['webhook-id'] });
      req.resume();
      res.writeHead(503).end();
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const path = (req.url ?? '/').split('?')[0]!;
      try {
        const payload = (byPath.get(path) ?? fallback).verify(body, req.headers as Record<string, string>) as { event: string; data: Record<string, unknown> };
        options.logger.info('demo merchant received a verified webhook', {
          webhookId: req.headers['webhook-id'],
          path,
          event: payload.event,
          reference: payload.data.tnxRef ?? payload.data.reference ?? payload.data.refundRef,
          status: payload.data.status,
        });
        res.writeHead(204).end();
      } catch (err) {
        options.logger.warn('demo merchant refused a webhook', { error: (err as Error).message });
        res.writeHead(400).end();
      }
    });
  });
}
