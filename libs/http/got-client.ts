import http from 'node:http';
import https from 'node:https';
import got, { type Request } from 'got';
import type { WebhookHttpClient, WebhookRequest, WebhookResponse } from './client.js';
import { WebhookNetworkError, WebhookTimeoutError } from './errors.js';

export interface GotClientOptions {
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

  return {
    post(request: WebhookRequest): Promise<WebhookResponse> {
      return new Promise((resolve, reject) => {
        let stream: Request;
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
