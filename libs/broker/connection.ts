import { EventEmitter } from 'node:events';
import amqp from 'amqplib';
import type { Channel, ChannelModel, ConfirmChannel, Options } from 'amqplib';
import type { Logger } from '../logger/index.js';
import type { AckBatcher } from './ack-batcher.js';
import { coalesceWrites, destroy, isAccessRefused } from './amqplib-gaps.js';
import { cancelAndClose, ignoreUnsolicitedReplies, within } from './channels.js';
import { type Consumer, consumerHandle, type ConsumeOptions, type ConsumerHost, type ConsumerState, openReader, type Reader, type ReaderOptions, startConsumer } from './consumers.js';
import { BrokerAccessRefusedError, BrokerUnavailableError, BrokerUnroutableError, StartAbortedError } from './errors.js';
import { ReturnTracker } from './return-tracker.js';
import { BROKER_BACKOFF, BROKER_START_DEADLINE_MS, CLOSE_STEP_MS } from './timing.js';
import { hostOf, redacted, shuffled, withHeartbeat } from './urls.js';

export type { Consumer, ConsumeOptions, Delivery, Reader, ReaderOptions } from './consumers.js';

export interface BrokerConnectionOptions {
  /**
   * One URL (a node, or a load balancer in front of a cluster), or the nodes of a cluster: the
   * connection takes them in a shuffled order, so replicas spread over the nodes, and on loss
   * goes on to the next that answers.
   */
  url: string | readonly string[];
  /** Shown as the connection name in the RabbitMQ console, with the node's host:port. */
  name: string;
  logger: Logger;
  /**
   * Runs after every (re)connect, before consumers start: declare topology here. Each call of
   * `openChannel` gives a fresh channel (a 406 closes the one it happened on); all are closed after.
   */
  declare?: (openChannel: () => Promise<Channel>) => Promise<void>;
  /** How long a publish waits for a connection before failing with BrokerUnavailableError. */
  publishWaitMs?: number;
  heartbeatSeconds?: number;
}

/**
 * One AMQP connection that recovers by itself (amqplib's own recovery: backoff with jitter) and
 * rebuilds its channels, topology and consumers on every reconnect. A channel lost while the
 * connection lives is recovered by reconnecting, which re-runs the same setup.
 */
export class BrokerConnection extends EventEmitter {
  private current?: ChannelModel;
  private publishChannel?: ConfirmChannel;
  private returns?: ReturnTracker;
  private readonly consumers = new Set<ConsumerState>();
  /** Every channel that consumes (programs' consumers and one-off readers): close() cancels them first. */
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
  /** The connection being set up, not yet in use: close() must not leave it behind. */
  private pending?: ChannelModel;
  /** host:port of the node this connection is on, for logs and the connection name. */
  node?: string;
  /** What the consumers (consumers.ts) use of this connection. */
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
    return this.current !== undefined && this.publishChannel !== undefined;
  }

  /**
   * Connects, retrying with backoff until `timeoutMs`; what cannot heal (a 406 in setup, a refused
   * login) fails at once, and so does an abort (Ctrl-C during start-up).
   */
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

  /** One connection attempt, to the next URL in turn; on failure the next attempt is scheduled. */
  private async connect(): Promise<void> {
    if (this.closing || this.connecting) return;
    this.connecting = true;
    const url = this.urls[this.nextUrl++ % this.urls.length]!;
    const node = hostOf(url);
    const { logger, name } = this.options;
    let model: ChannelModel | undefined;
    try {
      try {
        model = await amqp.connect(withHeartbeat(url, this.options.heartbeatSeconds ?? 15), {
          clientProperties: { connection_name: `${name} → ${node}` },
          // Without it Nagle's algorithm holds small frames (acks, confirms) for up to 40 ms.
          noDelay: true,
          // A node that does not answer (a dead host, a black hole) gives way to the next one.
          timeout: 10_000,
        });
      } catch (err) {
        if (isAccessRefused(err)) this.fatal = new BrokerAccessRefusedError(redacted(url));
        throw err;
      }
      this.pending = model;
      coalesceWrites(model);
      // Listen before anything else: an error emitted during setup (541 when a cluster node dies
      // under a stream consume) would otherwise end the process.
      model.on('error', (err: Error) => logger.warn('broker connection error', { connection: name, node, error: err.message }));
      const opened = model;
      let closed = false;
      model.on('close', (err?: Error) => {
        closed = true;
        this.lost(opened, err);
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
        // Reconnecting cannot fix it (someone re-created a queue with other arguments, the
        // password changed): say so and let the program stop, instead of running on without a broker.
        logger.error('broker refuses this program for good; not reconnecting', { connection: name, error: this.fatal.message });
        this.emit('fatal', this.fatal);
      }
    } finally {
      this.connecting = false;
      if (this.pending === model) this.pending = undefined;
    }
  }

  /** The connection in use closed: forget it and reconnect, to the next node in turn. */
  private lost(model: ChannelModel, err?: Error): void {
    if (this.closing || this.current !== model) return;
    this.forget();
    this.options.logger.warn('broker disconnected', { connection: this.options.name, node: this.node, error: err?.message ?? 'closed' });
    this.emit('disconnected');
    this.scheduleReconnect();
  }

  private forget(): void {
    this.current = undefined;
    this.publishChannel = undefined;
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

  /**
   * Declares the topology again on the live connection. A publish the broker returned unroutable
   * names a queue an operator deleted (`failed`, `invalid`): the next try then finds it, where
   * waiting for a reconnect would hold the message until its delivery limit parks it. Calls while
   * one runs share it.
   */
  declareAgain(): Promise<void> {
    const model = this.current;
    if (!model || !this.options.declare) return Promise.resolve();
    this.redeclaring ??= this.declareOn(model).finally(() => {
      this.redeclaring = undefined;
    });
    return this.redeclaring;
  }

  private redeclaring?: Promise<void>;

  private async declareOn(model: ChannelModel): Promise<void> {
    if (!this.options.declare) return;
    const opened: Channel[] = [];
    try {
      await this.options.declare(async () => {
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

  /** A confirm channel for publishes, with the tracker of what the broker returns as unroutable. */
  private async openPublishChannel(model: ChannelModel): Promise<{ channel: ConfirmChannel; returns: ReturnTracker }> {
    const channel = (await this.newChannel(model, true)) as ConfirmChannel;
    this.watch(model, channel, 'publish');
    return { channel, returns: new ReturnTracker(channel) };
  }

  /** Publishes go to this channel from now on; those waiting for one go ahead. */
  private usePublishChannel(publishing: { channel: ConfirmChannel; returns: ReturnTracker }): void {
    this.publishChannel = publishing.channel;
    this.returns = publishing.returns;
    for (const wake of this.waiters.splice(0)) wake();
  }

  /** A channel closed under a live connection (an operation error, a deleted queue): rebuild everything. */
  private watch(model: ChannelModel, channel: Channel, role: string): void {
    channel.on('error', (err: Error) => {
      this.options.logger.warn('broker channel error', { connection: this.options.name, role, error: err.message });
    });
    channel.on('close', () => {
      if (this.closing || this.current !== model || this.retired.has(channel)) return;
      this.options.logger.warn('broker channel closed, reconnecting', { connection: this.options.name, role });
      // Closing the connection brings 'close', which reconnects and rebuilds every channel.
      model.close().catch(() => {});
    });
  }

  /** Every channel opens here, guarded against replies nobody asked for (see ignoreUnsolicitedReplies). */
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

  /**
   * A consumer on a channel of its own for a one-off read (a stream entry at an offset, a probe):
   * not resumed after a reconnect. Its close() cancels the consumer before closing the channel, as
   * close() of the whole connection does for every reader still open.
   */
  async openReader(queue: string, options: ReaderOptions): Promise<Reader> {
    if (!this.current) throw new BrokerUnavailableError('not connected to RabbitMQ');
    return openReader(this.host, this.current, queue, options);
  }

  private async waitForPublishChannel(waitMs = this.options.publishWaitMs ?? 10_000): Promise<ConfirmChannel> {
    if (this.publishChannel) return this.publishChannel;
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

  /**
   * Publishes `mandatory` and resolves once the broker confirms it. Waits for a reconnect if
   * needed. A message the broker could not route (its queue was deleted) fails with
   * BrokerUnroutableError: a confirm alone does not say that anything stored it. With
   * `deadlineMs`, a publish not confirmed in time (a blocked connection under flow control) fails
   * with BrokerUnavailableError; it may still be stored later, so callers whose retry would
   * duplicate it leave the deadline out.
   */
  async publish(exchange: string, routingKey: string, content: Buffer, options: Options.Publish, deadlineMs?: number): Promise<void> {
    const started = Date.now();
    const channel = await this.waitForPublishChannel(deadlineMs);
    const returns = this.returns!;
    await new Promise<void>((resolve, reject) => {
      const pending = returns.expect(exchange, routingKey, content);
      let timer: NodeJS.Timeout | undefined;
      if (deadlineMs !== undefined) {
        timer = setTimeout(() => {
          returns.settle(pending);
          reject(new BrokerUnavailableError(`publish not confirmed within ${deadlineMs} ms`));
        }, Math.max(0, deadlineMs - (Date.now() - started)));
      }
      try {
        channel.publish(exchange, routingKey, content, { ...options, mandatory: true }, (err) => {
          clearTimeout(timer);
          const returned = returns.settle(pending);
          if (err) {
            this.renewPublishChannel(channel);
            reject(new BrokerUnavailableError('publish was not confirmed', { cause: err }));
          }
          else if (returned) reject(new BrokerUnroutableError(exchange, routingKey, returned));
          else resolve();
        });
      } catch (err) {
        clearTimeout(timer);
        returns.settle(pending);
        reject(new BrokerUnavailableError('publish failed', { cause: err }));
      }
    });
  }

  /**
   * Replaces the publish channel after a nack. On RabbitMQ 3.10, a channel that first publishes to
   * a quorum queue while the cluster still names a dead node as its leader keeps getting nacks for
   * as long as it lives (measured: every publish for 30 s and more after a node was killed), while
   * a channel opened a moment later is acked at once. A fresh channel costs one round trip; a nack
   * for another reason (no quorum) is answered the same either way.
   */
  private renewPublishChannel(stale: ConfirmChannel): void {
    const model = this.current;
    if (!model || this.publishChannel !== stale || this.renewing) return;
    this.renewing = true;
    this.publishChannel = undefined;
    this.retired.add(stale);
    this.options.logger.warn('broker nacked a publish; renewing the publish channel', { connection: this.options.name, node: this.node });
    void (async () => {
      try {
        await stale.close().catch(() => {});
        const publishing = await this.openPublishChannel(model);
        if (this.current === model) this.usePublishChannel(publishing);
      } catch {
        // The connection is going: reconnecting rebuilds every channel.
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

  /**
   * Safe to call twice. Cancel consumers and drain in-flight work before calling this. Bounded by
   * `timeoutMs` whatever the broker does: what it has not answered by then is cut (the socket is
   * destroyed), so a stopping program never waits on a broker that stopped answering.
   */
  async close(timeoutMs = 5_000): Promise<void> {
    if (this.closing) return this.closed;
    this.closing = true;
    this.closed = (async () => {
      const deadline = Date.now() + timeoutMs;
      clearTimeout(this.reconnectTimer);
      for (const wake of this.waiters.splice(0)) wake();
      // Close consumer channels first and wait for close-ok: RabbitMQ applies the acks sent on a
      // channel before closing it, but acks still in flight when the connection drops are lost
      // and those deliveries come back (measured on 3.10 quorum queues). Cancelled first: see cancelAndClose.
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
