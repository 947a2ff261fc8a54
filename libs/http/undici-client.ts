import { subscribe } from 'node:diagnostics_channel';
import type { Socket } from 'node:net';
import { Agent, Client, type Dispatcher, errors, util } from 'undici';
import { BlockedAddressError, guardedLookup, isBlockedAddress, literalAddress } from './address-guard.js';
import type { WebhookHttpClient, WebhookRequest, WebhookResponse } from './client.js';
import { type Deadlined, Deadlines } from './deadlines.js';
import { WebhookBlockedError, WebhookNetworkError, WebhookTimeoutError } from './errors.js';
import { BoundedMap } from '../runtime/bounded-map.js';

export interface UndiciClientOptions {
  /** false: refuse loopback, private, link-local and reserved targets. */
  allowPrivateTargets?: boolean;
  /** Bytes of each response body kept for the delivery log; 0 keeps none. */
  responseBodyBytes?: number;
  /** Connections per origin at most (a test's); none by default: the dispatcher's guards bound the requests in flight. */
  connectionsPerOrigin?: number;
  /** How long a connection may take to open (TCP and TLS): the attempt's deadline (DELIVERY_TIMEOUT_MS); undici's 10 s when not given. */
  connectTimeoutMs?: number;
  /** How long an idle connection is kept, whatever the merchant's Keep-Alive hint asks (IDLE_CONNECTION_MS). */
  idleMs?: number;
}

const MAX_RESPONSE_BYTES = 64 * 1024;
/** How long an idle connection to a merchant is kept by default, whatever its Keep-Alive hint asks. */
export const IDLE_CONNECTION_MS = 30_000;

/** undici, with no redirects, a deadline on the whole attempt, the body drained up to a cap, one retry (mayRetry). */
export function createUndiciClient(options: UndiciClientOptions = {}): WebhookHttpClient {
  const guard = options.allowPrivateTargets !== true;
  const keepBytes = Math.min(options.responseBodyBytes ?? 0, MAX_RESPONSE_BYTES);
  // Opening a connection is bounded by the attempt's deadline: at undici's 10 s a slower DELIVERY_TIMEOUT_MS
  // was cut short, and a shorter one left the socket opening after its attempt gave up.
  const connect = { ...(guard ? { lookup: guardedLookup as never } : {}), ...(options.connectTimeoutMs ? { timeout: options.connectTimeoutMs } : {}) };
  // The merchant's Keep-Alive hint is honoured up to the same cap: `timeout=600` held its sockets ten minutes.
  const idleMs = options.idleMs ?? IDLE_CONNECTION_MS;
  const agent = new Agent({ connections: options.connectionsPerOrigin, keepAliveTimeout: idleMs, keepAliveMaxTimeout: idleMs, connect });
  const deadlines = new Deadlines();
  const targets = new BoundedMap<string, Target>(10_000);
  const retries = new Set<Client>();

  return {
    post(req: WebhookRequest): Promise<WebhookResponse> {
      let target: Target;
      try {
        target = targetOf(req.url, guard, targets);
      } catch (err) {
        return Promise.reject(classify(err as UndiciError, req.timeoutMs));
      }
      if (target.blocked) return Promise.reject(new WebhookBlockedError(new BlockedAddressError(target.blocked, target.blocked).message));
      return new Promise((resolve, reject) => {
        // undici's own timeouts stay as a second line: headers, and the body between chunks.
        const request: Dispatcher.DispatchOptions = { origin: target.origin, path: target.path, method: 'POST', body: req.body, headers: req.headers, headersTimeout: req.timeoutMs, bodyTimeout: req.timeoutMs };
        // A connection of its own: another kept-alive one may be the next the merchant closes.
        const retry = (attempt: Attempt) => {
          const client = new Client(target.origin, { connect, keepAliveTimeout: idleMs, keepAliveMaxTimeout: idleMs });
          retries.add(client);
          client.dispatch({ ...request, reset: true }, attempt);
          void client.close().finally(() => retries.delete(client));
        };
        const attempt = new Attempt(req.timeoutMs, keepBytes, deadlines, resolve, reject, retry);
        deadlines.add(attempt, req.timeoutMs);
        agent.dispatch(request, attempt);
      });
    },
    close() {
      deadlines.close();
      for (const client of retries) void client.destroy();
      void agent.destroy();
    },
  };
}

interface Target {
  origin: string;
  path: string;
  /** The IP literal webhooks may not reach. */
  blocked: string | undefined;
}

/** Webhook URL → where undici sends it, cached: a URL parse per request cost as much as the rest of the client. */
function targetOf(url: string, guard: boolean, known: BoundedMap<string, Target>): Target {
  let target = known.get(url);
  if (target) return target;
  const parsed = new URL(url);
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new errors.InvalidArgumentError('Invalid URL protocol: the URL must start with `http:` or `https:`.');
  }
  const literal = guard ? literalAddress(parsed.hostname) : undefined;
  target = {
    origin: parsed.origin,
    path: parsed.search ? `${parsed.pathname}${parsed.search}` : parsed.pathname,
    blocked: literal && isBlockedAddress(literal) ? literal : undefined,
  };
  known.set(url, target);
  return target;
}

/** The connection a request went out on, as it was when its first byte was written. */
interface SentOn {
  socket: Socket;
  reused: boolean;
  /** Unchanged later: not one byte of this request's response came. */
  bytesRead: number;
}

const carried = new WeakSet<Socket>();
let armed: Attempt | undefined;
let subscribed = false;

/** undici publishes `undici:client:sendHeaders` synchronously after onConnect: the next message is this request's. */
function watchSend(attempt: Attempt): void {
  if (!subscribed) {
    subscribed = true;
    subscribe('undici:client:sendHeaders', (message) => {
      const { socket } = message as { socket: Socket };
      const reused = carried.has(socket);
      carried.add(socket);
      const watching = armed;
      armed = undefined;
      watching?.sentOn({ socket, reused, bytesRead: socket.bytesRead });
    });
  }
  armed = attempt;
}

/**
 * One POST as undici's request handler (request() costs more): the body is read up to the cap, its
 * first `keep` bytes kept; the deadline aborts it wherever it is, a trickling body included.
 */
class Attempt implements Deadlined {
  deadline = 0;
  newer: Deadlined | undefined;
  older: Deadlined | undefined;
  private abort: ((err: Error) => void) | undefined;
  private expired = false;
  private settled = false;
  private status = 0;
  private rawHeaders: Buffer[] = [];
  private received = 0;
  private kept: Buffer[] | undefined;
  private cut = false;
  private sent: SentOn | undefined;

  constructor(
    private readonly timeoutMs: number,
    private readonly keep: number,
    private readonly deadlines: Deadlines,
    private readonly resolve: (response: WebhookResponse) => void,
    private readonly reject: (err: Error) => void,
    private readonly retry: (attempt: Attempt) => void,
  ) {}

  expire(): void {
    this.expired = true;
    // Before the head: a timeout. While kept bytes are read: the answer stands, without a body.
    if (this.status === 0) this.fail(new WebhookTimeoutError(this.timeoutMs));
    else this.answer('');
    this.abort?.(new errors.RequestAbortedError('deadline passed'));
  }

  onConnect(abort: (err?: Error) => void): void {
    if (this.expired) abort(new errors.RequestAbortedError('deadline passed'));
    else {
      this.abort = abort;
      watchSend(this);
    }
  }

  sentOn(connection: SentOn): void {
    if (!this.settled) this.sent = connection;
  }

  onHeaders(status: number, rawHeaders: Buffer[], _resume: () => void, _statusText: string): boolean {
    if (status < 200) return true; // informational: the answer is still to come
    // undici passes 600-999 on: not HTTP (RFC 9110 15), no answer, as one undici's parser refuses.
    if (status > 599) {
      this.fail(new WebhookNetworkError('HPE_INVALID_STATUS', `status ${status} is outside HTTP's 100-599`));
      this.abort?.(new errors.RequestAbortedError('status outside 100-599'));
      return false;
    }
    this.status = status;
    this.rawHeaders = rawHeaders;
    if (this.keep > 0) this.kept = [];
    // As undici's dump(): a body announced over the cap, none of which is kept, is not read at all.
    else if ((contentLength(rawHeaders) ?? 0) > MAX_RESPONSE_BYTES) this.cutOff();
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.kept && this.received < this.keep) this.kept.push(chunk.subarray(0, this.keep - this.received));
    this.received += chunk.length;
    if (this.received > MAX_RESPONSE_BYTES) this.cutOff();
    return true;
  }

  onComplete(): void {
    this.deadlines.remove(this);
    this.answer(this.keptText());
  }

  onError(err: Error): void {
    if (this.mayRetry(err as UndiciError)) {
      this.sent = undefined;
      this.abort = undefined;
      this.retry(this);
      return;
    }
    this.deadlines.remove(this);
    if (this.status === 0) this.fail(classify(err as UndiciError, this.timeoutMs));
    // After the head, a body cut at the cap keeps what was read; any other body error keeps nothing.
    else this.answer(this.cut ? this.keptText() : '');
  }

  /** The keep-alive race (RFC 9112 9.3.1): sent again only on a reused connection from which no byte came. */
  private mayRetry(err: UndiciError): boolean {
    const sent = this.sent;
    if (this.expired || this.settled || this.status !== 0 || !sent?.reused || sent.socket.bytesRead !== sent.bytesRead) return false;
    const code = (err.cause && err.name === 'TypeError' ? err.cause : err).code;
    return code === 'ECONNRESET' || code === 'EPIPE' || code === 'UND_ERR_SOCKET';
  }

  private cutOff(): void {
    this.cut = true;
    this.abort?.(new errors.RequestAbortedError('response body over the cap'));
  }

  private keptText(): string | undefined {
    return this.kept && Buffer.concat(this.kept).toString('utf8');
  }

  private answer(body: string | undefined): void {
    if (this.settled) return;
    this.settled = true;
    this.resolve(new Answer(this.status, this.rawHeaders, this.keep === 0 ? undefined : body));
  }

  private fail(err: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(err);
  }
}

/** The response; its headers are parsed only when read. */
class Answer implements WebhookResponse {
  private parsed: WebhookResponse['headers'] | undefined;

  constructor(
    readonly status: number,
    private readonly rawHeaders: Buffer[],
    readonly body: string | undefined,
  ) {}

  get headers(): WebhookResponse['headers'] {
    return (this.parsed ??= util.parseHeaders(this.rawHeaders) as WebhookResponse['headers']);
  }
}

function contentLength(rawHeaders: Buffer[]): number | undefined {
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    if (name.length === 14 && name.toString('latin1').toLowerCase() === 'content-length') return Number(rawHeaders[i + 1]!.toString('latin1'));
  }
  return undefined;
}

type UndiciError = Error & { code?: string; cause?: Error & { code?: string } };

function classify(err: UndiciError, timeoutMs: number): Error {
  const root = err.cause && err.name === 'TypeError' ? err.cause : err;
  if (root.name === 'TimeoutError' || root instanceof errors.HeadersTimeoutError || root instanceof errors.ConnectTimeoutError) {
    return new WebhookTimeoutError(timeoutMs);
  }
  if (root.code === 'EBLOCKEDADDRESS') return new WebhookBlockedError(root.message);
  return new WebhookNetworkError(root.code ?? root.name, root.message);
}
