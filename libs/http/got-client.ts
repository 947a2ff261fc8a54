import http from 'node:http';
import https from 'node:https';
import got, { type Request } from 'got';
import { BlockedAddressError, guardedLookup, isBlockedAddress } from './address-guard.js';
import type { WebhookHttpClient, WebhookRequest, WebhookResponse } from './client.js';
import { literalAddress } from './literal.js';
import { WebhookBlockedError, WebhookNetworkError, WebhookTimeoutError } from './errors.js';

export interface GotClientOptions {
  /** false: refuse loopback, private, link-local and reserved targets, checked on the address connected to. */
  allowPrivateTargets?: boolean;
  /** Response bytes read before the connection is dropped; merchants' bodies are never needed. */
  maxResponseBytes?: number;
  /** Sockets per merchant host kept open and reused. */
  maxSocketsPerHost?: number;
}

/**
 * got in stream mode: the status is known as soon as the head arrives, and the body is drained up
 * to a small cap (so keep-alive sockets are reused) and never buffered. No retries, no redirects.
 */
export function createGotClient(options: GotClientOptions = {}): WebhookHttpClient {
  const maxResponseBytes = options.maxResponseBytes ?? 64 * 1024;
  const agentOptions = { keepAlive: true, maxSockets: options.maxSocketsPerHost ?? 256, scheduling: 'lifo' as const };
  const agent = { http: new http.Agent(agentOptions), https: new https.Agent(agentOptions) };

  const guard = options.allowPrivateTargets !== true;

  return {
    post(request: WebhookRequest): Promise<WebhookResponse> {
      return new Promise((resolve, reject) => {
        let stream: Request;
        if (guard) {
          // An IP literal never goes through DNS lookup, so it is checked here.
          const literal = literalAddress(request.url);
          if (literal && isBlockedAddress(literal)) {
            reject(new WebhookBlockedError(new BlockedAddressError(literal, literal).message));
            return;
          }
        }
        try {
          stream = got.stream.post(request.url, {
            body: request.body,
            headers: request.headers,
            timeout: { request: request.timeoutMs },
            retry: { limit: 0 },
            followRedirect: false,
            throwHttpErrors: false,
            decompress: false,
            agent,
            ...(guard ? { dnsLookup: guardedLookup as never } : {}),
          });
        } catch (err) {
          reject(new WebhookNetworkError('EINVALID', (err as Error).message));
          return;
        }
        let answered = false;
        stream.on('response', (response: http.IncomingMessage) => {
          answered = true;
          resolve({ status: response.statusCode ?? 0, headers: response.headers });
          let received = 0;
          stream.on('data', (chunk: Buffer) => {
            received += chunk.length;
            if (received > maxResponseBytes) stream.destroy();
          });
        });
        stream.on('error', (err: Error & { code?: string }) => {
          if (answered) return;
          if (err.name === 'TimeoutError') reject(new WebhookTimeoutError(request.timeoutMs));
          else if (err.code === 'EBLOCKEDADDRESS') reject(new WebhookBlockedError(err.message));
          else reject(new WebhookNetworkError(err.code ?? 'ERROR', err.message));
        });
      });
    },
    close() {
      agent.http.destroy();
      agent.https.destroy();
    },
  };
}
