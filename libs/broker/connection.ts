import { EventEmitter } from 'node:events';
import amqp, { type Channel, type ChannelModel, type ConfirmChannel, type Options } from 'amqplib';
import type { Logger } from '../logger/index.js';
import type { AckBatcher } from './ack-batcher.js';
import { coalesceWrites, destroy, isAccessRefused } from './amqplib-gaps.js';
import { within } from '../runtime/timers.js';
import { cancelAndClose, ignoreUnsolicitedReplies } from './channels.js';
import { type Consumer, consumerHandle, type ConsumeOptions, type ConsumerHost, type ConsumerState, openReader, type Reader, type ReaderOptions, startConsumer } from './consumers.js';
import { BrokerUnavailableError, BrokerUnroutableError, PublishUnconfirmedError, StartAbortedError } from './errors.js';
import { ReturnTracker } from './return-tracker.js';
import { BROKER_BACKOFF, BROKER_START_DEADLINE_MS, CLOSE_STEP_MS } from './timing.js';
import { hostOf, redacted, shuffled, withHeartbeat } from './urls.js';

type Publishing = { channel: ConfirmChannel; returns: ReturnTracker };

export interface BrokerConnectionOptions {
  /** One URL, or a cluster's nodes: tried in a shuffled order (replicas spread). */
  url: string | readonly string[];
  name: string;
  logger: Logger;
  /** Declares the topology after every (re)connect, before consumers start; each `openChannel` is a fresh channel (a 406 closes its own). */
  declare?: (openChannel: () => Promise<Channel>) => Promise<void>;
  /** How long a publish waits for a connection (BrokerUnavailableError past it). */
  publishWaitMs?: number;
}

/** One AMQP connection that reconnects by itself and rebuilds its topology, channels and consumers each time. */
export class BrokerConnection extends EventEmitter {
  private current?: ChannelModel;
  private publishing?: Publishing;
  private readonly consumers = new Set<ConsumerState>();
  /** Every consuming channel (consumers and readers): close() cancels them first. */
  private readonly consumerChannels = new Map<Channel, { acks?: AckBatcher; tags: Set<string> }>();
  private waiters: Array<() => void> = [];
  /** Publish channels closed on purpose (renewed after a nack): their close is not a failure. */
  private readonly retired = new WeakSet<Channel>();
  private renewing = false;
  private fatal?: Error;
  private closing = false;
  private closed?: Promise<void>;
  private readonly urls: string[];
  private nextUrl = 0;
  private attempt = 0;
  private connecting = false;
  private reconnectTimer?: NodeJS.Timeout;
  private firstConnect?: { resolve: () => void; reject: (err: Error) => void };
  /** Being set up: close() must not leave it behind. */
  private pending?: ChannelModel;
  private redeclaring?: Promise<void>;
  node?: string;
  private readonly host: ConsumerHost;

  constructor(private readonly options: BrokerConnectionOptions) {
    super();
    this.host = {
      logger: options.logger,
      consumers: this.consumers,
      consumerChannels: this.consumerChannels,
      retired: this.retired,
      newChannel: (model) => this.newChannel(model),
      watch: (model, channel, role) => this.watch(model, channel, role),
    };
    this.urls = shuffled(typeof options.url === 'string' ? [options.url] : [...options.url]);
    if (this.urls.length === 0) throw new Error('BrokerConnection needs at least one URL');
  }

  get isConnected(): boolean {
    return this.current !== undefined && this.publishing !== undefined;
  }

  /** Connects, retrying until `timeoutMs`; what cannot heal (a 406 in setup, a refused login) and an abort fail at once. */
  async open(timeoutMs = BROKER_START_DEADLINE_MS, signal?: AbortSignal): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        this.firstConnect = { resolve, reject };
        timer = setTimeout(
          () => reject(new BrokerUnavailableError(`RabbitMQ not reachable within ${timeoutMs} ms (RABBITMQ_URL)`)),
          timeoutMs,
        );
        onAbort = () => reject(new StartAbortedError());
        if (signal?.aborted) return onAbort();
        signal?.addEventListener('abort', onAbort, { once: true });
        void this.connect();
      });
    } catch (err) {
      await this.close(CLOSE_STEP_MS);
      throw err instanceof StartAbortedError ? err : (this.fatal ?? err);
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener('abort', onAbort);
      this.firstConnect = undefined;
    }
  }

  private async connect(): Promise<void> {
    if (this.closing || this.connecting) return;
    this.connecting = true;
    const url = this.urls[this.nextUrl++ % this.urls.length]!;
    const node = hostOf(url);
    const { logger, name } = this.options;
    let model: ChannelModel | undefined;
    try {
      try {
        model = await amqp.connect(withHeartbeat(url, 15), {
          clientProperties: { connection_name: `${name} → ${node}` },
          // Without it Nagle's algorithm holds small frames (acks, confirms) for up to 40 ms.
          noDelay: true,
          // A node that does not answer (a dead host, a black hole) gives way to the next one.
          timeout: 10_000,
        });
      } catch (err) {
        if (isAccessRefused(err)) this.fatal = new Error(`RabbitMQ refused the login (ACCESS_REFUSED) at ${redacted(url)}: check the user and password in RABBITMQ_URL`);
        throw err;
      }
      this.pending = model;
      coalesceWrites(model);
      // Before anything else: an unheard error during setup (541, a node dying under a stream consume) ends the process.
      model.on('error', (err: Error) => logger.warn('broker connection error', { connection: name, node, error: err.message }));
      let closed = false;
      model.on('close', (err?: Error) => {
        closed = true;
        this.lost(model!, err);
      });
      if (this.closing) throw new BrokerUnavailableError('closed while connecting');
      await this.setup(model);
      if (closed) throw new BrokerUnavailableError('connection closed during setup');
      if (this.closing) throw new BrokerUnavailableError('closed while connecting');
      this.attempt = 0;
      this.node = node;
      logger.info('broker connected', { connection: name, node });
      this.firstConnect?.resolve();
      this.emit('connected');
    } catch (err) {
      if (model && (await within(CLOSE_STEP_MS, model.close().then(() => true, () => true))) === undefined) destroy(model);
      if (this.current === model) this.forget();
      if (this.closing) return;
      logger.warn('broker connect failed', { connection: name, node, error: (err as Error).message });
      if (!this.fatal) this.scheduleReconnect();
      else if (this.firstConnect) this.firstConnect.reject(this.fatal);
      else {
        // Reconnecting cannot fix it (a queue re-created with other arguments, a changed password): the program stops.
        logger.error('broker refuses this program for good; not reconnecting', { connection: name, error: this.fatal.message });
        this.emit('fatal', this.fatal);
      }
    } finally {
      this.connecting = false;
      if (this.pending === model) this.pending = undefined;
    }
  }

  private lost(model: ChannelModel, err?: Error): void {
    if (this.closing || this.current !== model) return;
    this.forget();
    this.options.logger.warn('broker disconnected', { connection: this.options.name, node: this.node, error: err?.message ?? 'closed' });
    this.emit('disconnected');
    this.scheduleReconnect();
  }

  private forget(): void {
    this.current = undefined;
    this.publishing = undefined;
  }

  private scheduleReconnect(): void {
    if (this.closing || this.reconnectTimer) return;
    const base = Math.min(BROKER_BACKOFF.maxMs / (1 + BROKER_BACKOFF.jitter), BROKER_BACKOFF.initialMs * 2 ** this.attempt);
    const delay = Math.round(base * (1 + BROKER_BACKOFF.jitter * (Math.random() * 2 - 1)));
    this.attempt++;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      void this.connect();
    }, delay);
  }

  /** Declares the topology again now: an operator deleted a queue, which a reconnect would be too late to restore. */
  declareAgain(): Promise<void> {
    const model = this.current;
    if (!model || !this.options.declare) return Promise.resolve();
    this.redeclaring ??= this.declareOn(model).finally(() => {
      this.redeclaring = undefined;
    });
    return this.redeclaring;
  }

  private async declareOn(model: ChannelModel): Promise<void> {
    const opened: Channel[] = [];
    try {
      await this.options.declare?.(async () => {
        const channel = await this.newChannel(model);
        channel.on('error', () => {});
        opened.push(channel);
        return channel;
      });
    } finally {
      await Promise.all(opened.map((channel) => channel.close().catch(() => {})));
    }
  }

  private async setup(model: ChannelModel): Promise<void> {
    try {
      await this.declareOn(model);
      const publishing = await this.openPublishChannel(model);
      for (const consumer of this.consumers) await startConsumer(this.host, model, consumer);
      this.current = model;
      this.usePublishChannel(publishing);
    } catch (err) {
      if ((err as Error).name === 'TopologyMismatchError') this.fatal = err as Error;
      throw err;
    }
  }

  private async openPublishChannel(model: ChannelModel): Promise<Publishing> {
    const channel = (await this.newChannel(model, true)) as ConfirmChannel;
    this.watch(model, channel, 'publish');
    return { channel, returns: new ReturnTracker(channel) };
  }

  private usePublishChannel(publishing: Publishing): void {
    this.publishing = publishing;
    for (const wake of this.waiters.splice(0)) wake();
  }

  /** A channel closed under a live connection (an operation error, a deleted queue): reconnect, rebuilding everything. */
  private watch(model: ChannelModel, channel: Channel, role: string): void {
    channel.on('error', (err: Error) => {
      this.options.logger.warn('broker channel error', { connection: this.options.name, role, error: err.message });
      // A publish to a deleted exchange (a deleted queue is a return instead).
      if (role === 'publish' && (err as { code?: unknown }).code === 404) void this.declareAgain().catch(() => {});
    });
    channel.on('close', () => {
      if (this.closing || this.current !== model || this.retired.has(channel)) return;
      this.options.logger.warn('broker channel closed, reconnecting', { connection: this.options.name, role });
      model.close().catch(() => {});
    });
  }

  private async newChannel(model: ChannelModel, confirm = false): Promise<Channel> {
    const channel = confirm ? await model.createConfirmChannel() : await model.createChannel();
    ignoreUnsolicitedReplies(channel, (method) =>
      this.options.logger.warn('broker sent a reply nobody waits for; ignored', { connection: this.options.name, method }),
    );
    return channel;
  }

  /** Starts consuming now if connected, and again after every reconnect until cancelled. */
  async consume(queue: string, options: ConsumeOptions): Promise<Consumer> {
    const state: ConsumerState = { queue, options, cancelled: false };
    this.consumers.add(state);
    if (this.current) await startConsumer(this.host, this.current, state);
    return consumerHandle(this.host, state);
  }

  /** A one-off read on a channel of its own: not resumed after a reconnect. */
  async openReader(queue: string, options: ReaderOptions): Promise<Reader> {
    if (!this.current) throw new BrokerUnavailableError('not connected to RabbitMQ');
    return openReader(this.host, this.current, queue, options);
  }

  private async waitForPublishChannel(waitMs = this.options.publishWaitMs ?? 10_000): Promise<Publishing> {
    if (this.publishing) return this.publishing;
    if (this.closing) throw new BrokerUnavailableError('broker connection is closed');
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== wake);
        reject(new BrokerUnavailableError(`RabbitMQ unavailable for ${waitMs} ms`));
      }, waitMs);
      const wake = () => {
        clearTimeout(timer);
        resolve();
      };
      this.waiters.push(wake);
    });
    return this.waitForPublishChannel(waitMs);
  }

  /** Publishes `mandatory`, confirmed, waiting for a reconnect if needed; past `deadlineMs` it may still be stored later. */
  async publish(exchange: string, routingKey: string, content: Buffer, options: Options.Publish, deadlineMs?: number): Promise<void> {
    const started = Date.now();
    const { channel, returns } = await this.waitForPublishChannel(deadlineMs);
    await new Promise<void>((resolve, reject) => {
      const pending = returns.expect(exchange, routingKey, content);
      let timer: NodeJS.Timeout | undefined;
      if (deadlineMs !== undefined) {
        timer = setTimeout(() => {
          returns.settle(pending);
          reject(new PublishUnconfirmedError(deadlineMs));
        }, Math.max(0, deadlineMs - (Date.now() - started)));
      }
      try {
        channel.publish(exchange, routingKey, content, { ...options, mandatory: true }, (err) => {
          clearTimeout(timer);
          const returned = returns.settle(pending);
          if (err) {
            this.renewPublishChannel(channel);
            reject(new BrokerUnavailableError('publish was not confirmed', { cause: err }));
          } else if (returned) reject(new BrokerUnroutableError(exchange, routingKey, returned));
          else resolve();
        });
      } catch (err) {
        clearTimeout(timer);
        returns.settle(pending);
        reject(new BrokerUnavailableError('publish failed', { cause: err }));
      }
    });
  }

  /** After a nack: on RabbitMQ 3.10 a channel that published to a quorum queue whose leader died is nacked for as long as it lives. */
  private renewPublishChannel(stale: ConfirmChannel): void {
    const model = this.current;
    if (!model || this.publishing?.channel !== stale || this.renewing) return;
    this.renewing = true;
    this.publishing = undefined;
    this.retired.add(stale);
    this.options.logger.warn('broker nacked a publish; renewing the publish channel', { connection: this.options.name, node: this.node });
    void (async () => {
      try {
        await stale.close().catch(() => {});
        const publishing = await this.openPublishChannel(model);
        if (this.current === model) this.usePublishChannel(publishing);
      } catch {
        model.close().catch(() => {});
      } finally {
        this.renewing = false;
      }
    })();
  }

  sendToQueue(queue: string, content: Buffer, options: Options.Publish, deadlineMs?: number): Promise<void> {
    return this.publish('', queue, content, options, deadlineMs);
  }

  /** A channel for one-off operations (admin commands, tests); the caller closes it. */
  async createChannel(): Promise<Channel> {
    if (!this.current) throw new BrokerUnavailableError('not connected to RabbitMQ');
    const channel = await this.newChannel(this.current);
    channel.on('error', () => {});
    return channel;
  }

  /** Safe twice. Bounded by `timeoutMs`: then the socket is destroyed. */
  async close(timeoutMs = 5_000): Promise<void> {
    if (this.closing) return this.closed;
    this.closing = true;
    this.closed = (async () => {
      const deadline = Date.now() + timeoutMs;
      clearTimeout(this.reconnectTimer);
      for (const wake of this.waiters.splice(0)) wake();
      // Consumer channels first, awaiting close-ok: acks in flight on a dropped connection are lost.
      const step = Math.min(CLOSE_STEP_MS, timeoutMs / 2);
      await Promise.all(
        [...this.consumerChannels].map(([channel, { acks, tags }]) => {
          acks?.flush();
          return cancelAndClose(channel, tags, step);
        }),
      );
      const models = [...new Set([this.current, this.pending])].filter((m): m is ChannelModel => m !== undefined);
      const closedInTime = await within(deadline - Date.now(), Promise.all(models.map((m) => m.close().then(() => true, () => true))));
      if (!closedInTime) for (const model of models) destroy(model);
      this.forget();
    })();
    return this.closed;
  }
}
