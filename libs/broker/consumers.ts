import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import type { Logger } from '../logger/index.js';
import { AckBatcher } from './ack-batcher.js';
import { within } from '../runtime/timers.js';
import { cancelAndClose } from './channels.js';
import { CLOSE_STEP_MS } from './timing.js';

/** A delivery bound to the channel it came on: acking on a newer channel would close it (406). */
export interface Delivery {
  message: ConsumeMessage;
  /** False once the channel it came on is gone: the broker has already returned it to its queue. */
  readonly live: boolean;
  ack(): void;
  /** Requeue only for transient broker trouble, never in a loop. */
  nack(requeue: boolean): void;
}

export interface ConsumeOptions {
  prefetch: number;
  /** Computed at every (re)connect, e.g. a stream offset to resume from. */
  arguments?: () => Record<string, unknown>;
  onMessage: (delivery: Delivery) => void;
}

export interface Consumer {
  /** Stops new deliveries; those handed out can still be acked. */
  cancel(): Promise<void>;
  /** Cancels, then closes the channel: safe twice. */
  close(): Promise<void>;
}

export interface ReaderOptions {
  prefetch: number;
  arguments?: Record<string, unknown>;
  /** Each entry, acked already; null when the broker cancelled the read (the queue was deleted). */
  onMessage(message: ConsumeMessage | null): void;
  onClose?(): void;
}

export type Reader = Pick<Consumer, 'close'>;

export interface ConsumerState {
  queue: string;
  options: ConsumeOptions;
  channel?: Channel;
  tag?: string;
  cancelled: boolean;
}

/** BrokerConnection's fields of the same names. */
export interface ConsumerHost {
  readonly logger: Logger;
  readonly consumers: Set<ConsumerState>;
  readonly consumerChannels: Map<Channel, { acks?: AckBatcher; tags: Set<string> }>;
  readonly retired: WeakSet<Channel>;
  newChannel(model: ChannelModel): Promise<Channel>;
  watch(model: ChannelModel, channel: Channel, role: string): void;
}

export async function startConsumer(host: ConsumerHost, model: ChannelModel, state: ConsumerState): Promise<void> {
  if (state.cancelled) return;
  const channel = await host.newChannel(model);
  const acks = new AckBatcher(channel);
  const tags = new Set<string>();
  host.consumerChannels.set(channel, { acks, tags });
  let open = true;
  channel.on('close', () => {
    open = false;
    host.consumerChannels.delete(channel);
  });
  host.watch(model, channel, `consume ${state.queue}`);
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
      if (message === null) {
        // Queue deleted or its leader moved: reconnecting re-declares and resumes.
        tags.clear();
        host.logger.warn('broker cancelled consumer', { queue: state.queue });
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
}

/** Cancelling takes the consumer out of the registry: no reconnect resumes it. */
export function consumerHandle(host: ConsumerHost, state: ConsumerState): Consumer {
  const cancel = async () => {
    if (state.cancelled) return;
    state.cancelled = true;
    host.consumers.delete(state);
    if (state.channel && state.tag) {
      const { channel, tag } = state;
      await within(CLOSE_STEP_MS, channel.cancel(tag).then(() => host.consumerChannels.get(channel)?.tags.delete(tag), () => {}));
    }
  };
  return {
    cancel,
    close: async () => {
      const channel = state.channel;
      await cancel();
      if (!channel || host.retired.has(channel)) return;
      host.retired.add(channel);
      host.consumerChannels.delete(channel);
      await within(CLOSE_STEP_MS, channel.close().catch(() => {}));
    },
  };
}

export async function openReader(host: ConsumerHost, model: ChannelModel, queue: string, options: ReaderOptions): Promise<Reader> {
  const channel = await host.newChannel(model);
  const tags = new Set<string>();
  host.consumerChannels.set(channel, { tags });
  let closing = false;
  channel.on('error', () => {});
  channel.on('close', () => {
    host.consumerChannels.delete(channel);
    if (!closing) options.onClose?.();
  });
  const close = async () => {
    if (closing) return;
    closing = true;
    host.consumerChannels.delete(channel);
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
