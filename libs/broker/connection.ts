import { EventEmitter } from 'node:events';
import amqp from 'amqplib';
import type { Channel, ChannelModel, ConfirmChannel, ConsumeMessage, Options, RecoveringChannelModel } from 'amqplib';
import type { Logger } from '../logger/index.js';
import { AckBatcher } from './ack-batcher.js';
import { BrokerUnavailableError, BrokerUnroutableError } from './errors.js';
import { ReturnTracker } from './return-tracker.js';

export interface BrokerConnectionOptions {
  url: string;
  /** Shown as the connection name in the RabbitMQ console. */
  name: string;
  logger: Logger;
  /** Runs on a fresh channel after every (re)connect, before consumers start: declare topology here. */
  declare?: (channel: Channel) => Promise<void>;
  /** How long a publish waits for a connection before failing with BrokerUnavailableError. */
  publishWaitMs?: number;
  heartbeatSeconds?: number;
}

/** A delivery bound to the channel it came on: acking on a newer channel would close it (406). */
export interface Delivery {
  message: ConsumeMessage;
  /** False once the channel it came on is gone: the broker has already returned it to its queue. */
  readonly live: boolean;
  ack(): void;
  /** Requeue only for transient broker trouble, never in a loop: RabbitMQ 4.x drops a message after 20. */
  nack(requeue: boolean): void;
}

export interface ConsumeOptions {
  prefetch: number;
  /** Consume arguments, computed at every (re)connect, e.g. a stream offset to resume from. */
  arguments?: () => Record<string, unknown>;
  onMessage: (delivery: Delivery) => void;
}

export interface Consumer {
  /** Stops new deliveries; deliveries already handed out can still be acked. */
  cancel(): Promise<void>;
}

interface ConsumerState {
  queue: string;
  options: ConsumeOptions;
  channel?: Channel;
  tag?: string;
  cancelled: boolean;
}

/**
 * One AMQP connection that recovers by itself (amqplib's own recovery: backoff with jitter) and
 * rebuilds its channels, topology and consumers on every reconnect. A channel lost while the
 * connection lives is recovered by reconnecting, which re-runs the same setup.
 */
export class BrokerConnection extends EventEmitter {
  private model?: RecoveringChannelModel;
  private current?: ChannelModel;
  private publishChannel?: ConfirmChannel;
  private returns?: ReturnTracker;
  private readonly consumers = new Set<ConsumerState>();
  private readonly consumerChannels = new Map<Channel, AckBatcher>();
  private waiters: Array<() => void> = [];
  private fatal?: Error;
  private closing = false;

  constructor(private readonly options: BrokerConnectionOptions) {
    super();
  }

  get isConnected(): boolean {
    return this.current !== undefined && this.publishChannel !== undefined;
  }

  /** Connects, retrying with backoff until `timeoutMs`; a setup error that cannot heal (406) fails at once. */
  async open(timeoutMs = 30_000): Promise<void> {
    const { logger } = this.options;
    this.model = await amqp.connect(withHeartbeat(this.options.url, this.options.heartbeatSeconds ?? 15), {
      clientProperties: { connection_name: this.options.name },
      // Without it Nagle's algorithm holds small frames (acks, confirms) for up to 40 ms.
      noDelay: true,
      recovery: {
        waitForConnect: false,
        initialDelay: 200,
        maxDelay: 5_000,
        setup: (model: ChannelModel) => this.setup(model),
      },
    });
    this.model.on('connect', () => {
      logger.info('broker connected', { connection: this.options.name });
      this.emit('connected');
    });
    this.model.on('disconnect', (err: Error) => {
      this.current = undefined;
      this.publishChannel = undefined;
      logger.warn('broker disconnected', { connection: this.options.name, error: err.message });
      this.emit('disconnected');
    });
    this.model.on('connect-failed', (err: Error) => {
      logger.warn('broker connect failed', { connection: this.options.name, error: err.message });
      if (this.fatal) void this.model?.close();
    });
    this.model.on('error', () => {
      // 'disconnect' follows; the error itself is already logged there.
    });

    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.model.waitForConnect(),
        new Promise((_, reject) => {
          timer = setTimeout(
            () => reject(new BrokerUnavailableError(`RabbitMQ not reachable within ${timeoutMs} ms (RABBITMQ_URL)`)),
            timeoutMs,
          );
        }),
      ]);
    } catch (err) {
      await this.close();
      throw this.fatal ?? err;
    } finally {
      clearTimeout(timer);
    }
  }

  private async setup(model: ChannelModel): Promise<void> {
    // amqplib's recovery runs setup before it listens to the new connection: an error emitted
    // meanwhile (541 when a cluster node dies under a stream consume) would crash the process.
    model.on('error', (err: Error) => {
      this.options.logger.warn('broker connection error', { connection: this.options.name, error: err.message });
    });
    try {
      if (this.options.declare) {
        const channel = await model.createChannel();
        channel.on('error', () => {});
        await this.options.declare(channel);
        await channel.close();
      }
      const publishChannel = await model.createConfirmChannel();
      this.watch(model, publishChannel, 'publish');
      const returns = new ReturnTracker(publishChannel);
      for (const consumer of this.consumers) await this.startConsumer(model, consumer);
      this.current = model;
      this.publishChannel = publishChannel;
      this.returns = returns;
      for (const wake of this.waiters.splice(0)) wake();
    } catch (err) {
      if ((err as Error).name === 'TopologyMismatchError') this.fatal = err as Error;
      throw err;
    }
  }

  /** A channel closed under a live connection (an operation error, a deleted queue): rebuild everything. */
  private watch(model: ChannelModel, channel: Channel, role: string): void {
    channel.on('error', (err: Error) => {
      this.options.logger.warn('broker channel error', { connection: this.options.name, role, error: err.message });
    });
    channel.on('close', () => {
      if (this.closing || this.current !== model) return;
      this.options.logger.warn('broker channel closed, reconnecting', { connection: this.options.name, role });
      this.current = undefined;
      this.publishChannel = undefined;
      model.close().catch(() => {});
    });
  }

  private async startConsumer(model: ChannelModel, state: ConsumerState): Promise<void> {
    if (state.cancelled) return;
    const channel = await model.createChannel();
    const acks = new AckBatcher(channel);
    this.consumerChannels.set(channel, acks);
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
      nack: (requeue) => swallowClosed(() => acks.nack(message.fields.deliveryTag, requeue)),
    });
    const reply = await channel.consume(
      state.queue,
      (message) => {
        if (message === null) {
          // The broker cancelled us (queue deleted or its leader moved): reconnecting re-declares and resumes.
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
  }

  /** Starts consuming now if connected, and again after every reconnect until cancelled. */
  async consume(queue: string, options: ConsumeOptions): Promise<Consumer> {
    const state: ConsumerState = { queue, options, cancelled: false };
    this.consumers.add(state);
    if (this.current) await this.startConsumer(this.current, state);
    return {
      cancel: async () => {
        if (state.cancelled) return;
        state.cancelled = true;
        this.consumers.delete(state);
        if (state.channel && state.tag) await state.channel.cancel(state.tag).catch(() => {});
      },
    };
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
          if (err) reject(new BrokerUnavailableError('publish was not confirmed', { cause: err }));
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

  sendToQueue(queue: string, content: Buffer, options: Options.Publish, deadlineMs?: number): Promise<void> {
    return this.publish('', queue, content, options, deadlineMs);
  }

  /** A channel for one-off operations (admin commands, tests); the caller closes it. */
  async createChannel(): Promise<Channel> {
    if (!this.current) throw new BrokerUnavailableError('not connected to RabbitMQ');
    const channel = await this.current.createChannel();
    channel.on('error', () => {});
    return channel;
  }

  /** Safe to call twice. Cancel consumers and drain in-flight work before calling this. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    for (const wake of this.waiters.splice(0)) wake();
    // Close consumer channels first and wait for close-ok: RabbitMQ applies the acks sent on a
    // channel before closing it, but acks still in flight when the connection drops are lost
    // and those deliveries come back (measured on 3.10 quorum queues).
    await Promise.all(
      [...this.consumerChannels].map(([channel, acks]) => {
        acks.flush();
        return channel.close().catch(() => {});
      }),
    );
    await this.model?.close().catch(() => {});
    this.current = undefined;
    this.publishChannel = undefined;
  }
}

function swallowClosed(op: () => void): void {
  try {
    op();
  } catch {
    // The channel is gone, so the broker has already returned this delivery to its queue.
  }
}

function withHeartbeat(url: string, seconds: number): string {
  const parsed = new URL(url);
  if (!parsed.searchParams.has('heartbeat')) parsed.searchParams.set('heartbeat', String(seconds));
  return parsed.toString();
}
