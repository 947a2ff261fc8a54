import { EventEmitter } from 'node:events';
import amqp, { type Channel, type ChannelModel, type ConfirmChannel, type ConsumeMessage, type Options } from 'amqplib';
import type { Message } from 'amqplib';
import type { Logger } from '../logger/index.js';
import { AckBatcher } from './ack-batcher.js';
import { cancelAndClose, coalesceWrites, destroy, ignoreUnsolicitedReplies, isAccessRefused } from './amqplib-gaps.js';
import { within } from '../runtime/timers.js';
import type { Consumer, ConsumeOptions, ConsumerState, Delivery, Reader, ReaderOptions } from './consumers.js';
import { BrokerUnavailableError, BrokerUnroutableError, PublishUnconfirmedError, StartAbortedError } from './errors.js';
import { BROKER_BACKOFF, BROKER_START_DEADLINE_MS, CLOSE_STEP_MS } from './timing.js';
import { hostOf, redacted, shuffled, withHeartbeat } from './urls.js';

type Publishing = { channel: ConfirmChannel; unconfirmed: Set<Unconfirmed> };
/** A publish not confirmed yet; `returned`: the reply text of the basic.return that came for it. */
type Unconfirmed = { exchange: string; routingKey: string; content: Buffer; returned?: string };

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
  /** Connections RabbitMQ blocks now, and why (a WeakMap: a closed one goes with its model). */
  private readonly blockedBy = new WeakMap<ChannelModel, string>();
  private publishing?: Publishing;
  private readonly consumers = new Set<ConsumerState>();
  /** Every consuming channel (consumers and readers): close() cancels them first. */
  private readonly consumerChannels = new Map<Channel, { acks?: AckBatcher; tags: Set<string> }>();
  private waiters: Array<() => void> = [];
  /** Publish channels closed on purpose (renewed after a nack): their close is not a failure. */
  private readonly retired = new WeakSet<Channel>();
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
  /** Settles when the broker refuses this program for good after it first connected; heard however late it is asked. */
  readonly refused = new Promise<Error>((resolve) => this.once('fatal', resolve));

  constructor(private readonly options: BrokerConnectionOptions) {
    super();
    this.urls = shuffled(typeof options.url === 'string' ? [options.url] : [...options.url]);
    if (this.urls.length === 0) throw new Error('BrokerConnection needs at least one URL');
  }

  get isConnected(): boolean {
    return this.current !== undefined && this.publishing !== undefined;
  }

  /** Why RabbitMQ blocks this connection now (a memory or disk alarm: its publishes, moves and acks wait), or undefined. */
  get blocked(): string | undefined {
    return this.current ? this.blockedBy.get(this.current) : undefined;
  }

  /** Connects, retrying until `timeoutMs`; what cannot heal (a 406 in setup, a refused login) and an abort fail at once. */
  async open(timeoutMs = BROKER_START_DEADLINE_MS, signal?: AbortSignal): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        this.firstConnect = { resolve, reject };
        const late = new BrokerUnavailableError(`RabbitMQ not reachable within ${timeoutMs} ms (RABBITMQ_URL)`);
        timer = setTimeout(reject, timeoutMs, late);
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
      model = await amqp.connect(withHeartbeat(url, 15), {
        clientProperties: { connection_name: `${name} → ${node}` },
        // Without it Nagle's algorithm holds small frames (acks, confirms) for up to 40 ms.
        noDelay: true,
        // A node that does not answer (a dead host, a black hole) gives way to the next one.
        timeout: 10_000,
      });
      this.pending = model;
      coalesceWrites(model);
      // Before anything else: an unheard error during setup (541, a node dying under a stream consume) ends the process.
      model.on('error', (err: Error) => logger.warn('broker connection error', { connection: name, node, error: err.message }));
      // Connected, yet nothing it publishes (nor acks, on the same socket) is read until the alarm clears: said, not hidden.
      model.on('blocked', (reason: string) => {
        this.blockedBy.set(model!, reason || 'an alarm');
        logger.warn('broker blocked this connection: publishes wait until its alarm clears', { connection: name, node, reason });
      });
      model.on('unblocked', () => {
        this.blockedBy.delete(model!);
        logger.info('broker unblocked this connection', { connection: name, node });
      });
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
      if (isAccessRefused(err)) this.fatal = new Error(`RabbitMQ refused the login (ACCESS_REFUSED) at ${redacted(url)}: check the user and password in RABBITMQ_URL`);
      if ((err as Error).name === 'TopologyMismatchError') this.fatal = err as Error;
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
        opened.push(channel);
        return channel;
      });
    } finally {
      await Promise.all(opened.map((channel) => channel.close().catch(() => {})));
    }
  }

  private async setup(model: ChannelModel): Promise<void> {
    await this.declareOn(model);
    const publishing = await this.openPublishChannel(model);
    for (const consumer of this.consumers) await this.startConsumer(model, consumer);
    this.current = model;
    this.usePublishChannel(publishing);
  }

  private async openPublishChannel(model: ChannelModel): Promise<Publishing> {
    const channel = (await this.newChannel(model, true)) as ConfirmChannel;
    this.watch(model, channel, 'publish');
    const unconfirmed = new Set<Unconfirmed>();
    // A basic.return has no delivery tag: it is the oldest unconfirmed publish with its exchange, routing key and body.
    channel.on('return', ({ fields, content }: Message) => {
      const { exchange, routingKey, replyText } = fields as Message['fields'] & { replyText?: string };
      for (const entry of unconfirmed) {
        const same = entry.exchange === exchange && entry.routingKey === routingKey && entry.content.equals(content);
        if (entry.returned === undefined && same) {
          entry.returned = replyText ?? 'NO_ROUTE';
          return;
        }
      }
    });
    return { channel, unconfirmed };
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
    // Heard, so that it cannot end the process: the close that follows is what counts (watch()).
    channel.on('error', () => {});
    ignoreUnsolicitedReplies(channel, (method) =>
      this.options.logger.warn('broker sent a reply nobody waits for; ignored', { connection: this.options.name, method }),
    );
    return channel;
  }

  /** Starts consuming now if connected, and again after every reconnect until cancelled. */
  async consume(queue: string, options: ConsumeOptions): Promise<Consumer> {
    const state: ConsumerState = { queue, options, cancelled: false };
    this.consumers.add(state);
    if (this.current) {
      await this.startConsumer(this.current, state).catch((err: unknown) => {
        // Refused (a queue not there) or cut off: the caller holds no consumer to cancel, so no reconnect resumes this one.
        state.cancelled = true;
        this.consumers.delete(state);
        throw err;
      });
    }
    // Cancelling takes the consumer out of the registry: no reconnect resumes it.
    const cancel = async () => {
      if (state.cancelled) return;
      state.cancelled = true;
      this.consumers.delete(state);
      // A reconnect's start under way ends first: the consumer it makes is the one to cancel, not the one before.
      await within(CLOSE_STEP_MS, state.starting ?? Promise.resolve());
      const { channel, tag } = state;
      if (channel && tag) await within(CLOSE_STEP_MS, channel.cancel(tag).then(() => this.consumerChannels.get(channel)?.tags.delete(tag), () => {}));
    };
    return {
      cancel,
      close: async () => {
        await cancel();
        const channel = state.channel;
        if (!channel || this.retired.has(channel)) return;
        this.retired.add(channel);
        this.consumerChannels.delete(channel);
        await within(CLOSE_STEP_MS, channel.close().catch(() => {}));
      },
    };
  }

  private startConsumer(model: ChannelModel, state: ConsumerState): Promise<void> {
    const started = this.startConsumerOn(model, state);
    state.starting = started.catch(() => {});
    return started;
  }

  private async startConsumerOn(model: ChannelModel, state: ConsumerState): Promise<void> {
    if (state.cancelled) return;
    const channel = await this.newChannel(model);
    const acks = new AckBatcher(channel);
    const tags = new Set<string>();
    this.consumerChannels.set(channel, { acks, tags });
    let open = true;
    channel.on('close', () => {
      open = false;
      this.consumerChannels.delete(channel);
    });
    this.watch(model, channel, `consume ${state.queue}`);
    await channel.prefetch(state.options.prefetch);
    const bound = (message: ConsumeMessage): Delivery => ({
      message,
      get live() {
        return open;
      },
      ack: () => acks.ack(message.fields.deliveryTag),
      nack: (requeue) => acks.nack(message.fields.deliveryTag, requeue),
    });
    const reply = await channel.consume(
      state.queue,
      (message) => {
        // Cancelled (a stop) while this start was under way: left unacked, it goes back with the channel, never sent.
        if (state.cancelled) return;
        if (message === null) {
          // Queue deleted or its leader moved: reconnecting re-declares and resumes.
          tags.clear();
          this.options.logger.warn('broker cancelled consumer', { queue: state.queue });
          if (!state.cancelled) model.close().catch(() => {});
          return;
        }
        state.options.onMessage(bound(message));
      },
      { noAck: false, arguments: state.options.arguments?.() },
    );
    state.channel = channel;
    state.tag = reply.consumerTag;
    tags.add(reply.consumerTag);
    // Cancelled after cancel() stopped waiting for this start (a consume held up by a leader election): cancelled here.
    if (state.cancelled) {
      state.tag = undefined;
      await within(CLOSE_STEP_MS, channel.cancel(reply.consumerTag).then(() => tags.delete(reply.consumerTag), () => {}));
    }
  }

  /** A one-off read on a channel of its own: not resumed after a reconnect. */
  async openReader(queue: string, options: ReaderOptions): Promise<Reader> {
    const channel = await this.createChannel();
    const tags = new Set<string>();
    this.consumerChannels.set(channel, { tags });
    let closing = false;
    channel.on('close', () => {
      this.consumerChannels.delete(channel);
      if (!closing) options.onClose?.();
    });
    const close = async () => {
      if (closing) return;
      closing = true;
      this.consumerChannels.delete(channel);
      await cancelAndClose(channel, tags, CLOSE_STEP_MS);
    };
    try {
      await channel.prefetch(options.prefetch);
      const reply = await channel.consume(
        queue,
        (message) => {
          if (message) channel.ack(message);
          else tags.clear(); // the broker cancelled it: nothing left to cancel
          options.onMessage(message);
        },
        { noAck: false, arguments: options.arguments },
      );
      tags.add(reply.consumerTag);
    } catch (err) {
      await close();
      throw err;
    }
    return { close };
  }

  private async waitForPublishChannel(waitMs = this.options.publishWaitMs ?? 10_000): Promise<Publishing> {
    if (this.publishing) return this.publishing;
    if (this.closing) throw new BrokerUnavailableError('broker connection is closed');
    let wake!: () => void;
    const woken = new Promise<boolean>((resolve) => this.waiters.push((wake = () => resolve(true))));
    if (!(await within(waitMs, woken))) {
      this.waiters = this.waiters.filter((w) => w !== wake);
      throw new BrokerUnavailableError(`RabbitMQ unavailable for ${waitMs} ms`);
    }
    return this.waitForPublishChannel(waitMs);
  }

  /** Publishes `mandatory`, confirmed, waiting for a reconnect if needed; past `deadlineMs` it may still be stored later. */
  async publish(exchange: string, routingKey: string, content: Buffer, options: Options.Publish, deadlineMs?: number): Promise<void> {
    const started = Date.now();
    const { channel, unconfirmed } = await this.waitForPublishChannel(deadlineMs);
    await new Promise<void>((resolve, reject) => {
      const pending: Unconfirmed = { exchange, routingKey, content };
      unconfirmed.add(pending);
      let timer: NodeJS.Timeout | undefined;
      if (deadlineMs !== undefined) {
        timer = setTimeout(() => {
          unconfirmed.delete(pending);
          reject(new PublishUnconfirmedError(deadlineMs));
        }, Math.max(0, deadlineMs - (Date.now() - started)));
      }
      try {
        channel.publish(exchange, routingKey, content, { ...options, mandatory: true }, (err) => {
          clearTimeout(timer);
          unconfirmed.delete(pending);
          if (err) {
            this.renewPublishChannel(channel);
            reject(new BrokerUnavailableError('publish was not confirmed', { cause: err }));
          } else if (pending.returned) reject(new BrokerUnroutableError(exchange, routingKey, pending.returned));
          else resolve();
        });
      } catch (err) {
        clearTimeout(timer);
        unconfirmed.delete(pending);
        reject(new BrokerUnavailableError('publish failed', { cause: err }));
      }
    });
  }

  /** After a nack: on RabbitMQ 3.10 a channel that published to a quorum queue whose leader died is nacked for as long as it lives. */
  private renewPublishChannel(stale: ConfirmChannel): void {
    const model = this.current;
    // Once: the first nack takes the stale channel out of use.
    if (!model || this.publishing?.channel !== stale) return;
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
      }
    })();
  }

  sendToQueue(queue: string, content: Buffer, options: Options.Publish, deadlineMs?: number): Promise<void> {
    return this.publish('', queue, content, options, deadlineMs);
  }

  /** A channel for one-off operations (admin commands, tests); the caller closes it. */
  async createChannel(): Promise<Channel> {
    if (!this.current) throw new BrokerUnavailableError('not connected to RabbitMQ');
    return this.newChannel(this.current);
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
