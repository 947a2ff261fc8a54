import { EventEmitter } from 'node:events';
import { Agent, errors, request } from 'undici';
import { BlockedAddressError, guardedLookup, isBlockedAddress } from './address-guard.js';
import type { WebhookHttpClient, WebhookRequest, WebhookResponse } from './client.js';
import { WebhookBlockedError, WebhookNetworkError, WebhookTimeoutError } from './errors.js';
import { literalAddress } from './literal.js';

export interface UndiciClientOptions {
  /** false: refuse loopback, private, link-local and reserved targets, checked on the address connected to. */
  allowPrivateTargets?: boolean;
  /** Response bytes read before the connection is dropped; merchants' bodies are never needed. */
  maxResponseBytes?: number;
  /**
   * Bytes of each response body kept for the delivery log (DELIVERY_LOG_RESPONSE_BYTES); 0 keeps
   * none and answers as soon as the head arrives.
   */
  responseBodyBytes?: number;
  /** Connections per merchant origin kept open and reused. */
  connectionsPerOrigin?: number;
}

/**
 * undici: about four times got's request rate on this machine (BENCHMARKS.md), which makes it the
 * dispatcher's default. Same contract as the got client: no retries, no redirects, a deadline on
 * the whole attempt, the body drained up to a cap and never buffered.
 */
export function createUndiciClient(options: UndiciClientOptions = {}): WebhookHttpClient {
  const guard = options.allowPrivateTargets !== true;
  const maxResponseBytes = options.maxResponseBytes ?? 64 * 1024;
  const keepBytes = Math.min(options.responseBodyBytes ?? 0, maxResponseBytes);
  const agent = new Agent({
    connections: options.connectionsPerOrigin ?? 256,
    keepAliveTimeout: 30_000,
    connect: guard ? { lookup: guardedLookup as never } : {},
  });

  return {
    async post(req: WebhookRequest): Promise<WebhookResponse> {
      if (guard) {
        const literal = literalAddress(req.url);
        if (literal && isBlockedAddress(literal)) throw new WebhookBlockedError(new BlockedAddressError(literal, literal).message);
      }
      // One deadline for the whole attempt. undici takes an EventEmitter as its abort signal, which
      // costs far less per request than AbortSignal.timeout (4% of the dispatcher's CPU, profiled).
      const signal = new EventEmitter();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        signal.emit('abort');
      }, req.timeoutMs);
      try {
        const res = await request(req.url, {
          method: 'POST',
          body: req.body,
          headers: req.headers,
          dispatcher: agent,
          signal,
          headersTimeout: req.timeoutMs,
          bodyTimeout: req.timeoutMs,
        });
        if (keepBytes === 0) {
          clearTimeout(timer);
          res.body.dump({ limit: maxResponseBytes }).catch(() => {});
          return { status: res.statusCode, headers: res.headers };
        }
        // The deadline still runs while the kept bytes are read: a slow body cannot hold the attempt.
        const body = await readCapped(res.body, keepBytes, maxResponseBytes).catch(() => '');
        clearTimeout(timer);
        return { status: res.statusCode, headers: res.headers, body };
      } catch (err) {
        clearTimeout(timer);
        if (timedOut) throw new WebhookTimeoutError(req.timeoutMs);
        throw classify(err as Error & { code?: string; cause?: Error & { code?: string } }, req.timeoutMs);
      }
    },
    close() {
      void agent.destroy();
    },
  };
}

function classify(err: Error & { code?: string; cause?: Error & { code?: string } }, timeoutMs: number): Error {
  const root = err.cause && err.name === 'TypeError' ? err.cause : err;
  if (root.name === 'TimeoutError' || root instanceof errors.HeadersTimeoutError || root instanceof errors.ConnectTimeoutError) {
    return new WebhookTimeoutError(timeoutMs);
  }
  if (root.code === 'EBLOCKEDADDRESS') return new WebhookBlockedError(root.message);
  return new WebhookNetworkError(root.code ?? root.name, root.message);
}

/**
 * The first `keep` bytes of a body; the rest is read and dropped up to `max` (so the connection
 * can be reused), and a body longer than that is cut off.
 */
async function readCapped(body: AsyncIterable<Buffer> & { destroy(): void }, keep: number, max: number): Promise<string> {
  const kept: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    if (size < keep) kept.push(chunk.subarray(0, keep - size));
    size += chunk.length;
    if (size > max) {
      body.destroy();
      break;
    }
  }
  return Buffer.concat(kept).toString('utf8');
}
