import type { Channel } from 'amqplib';
import { within } from '../runtime/timers.js';

/** An AMQP method's frame id as amqplib numbers it. */
const method = (classId: number, methodId: number) => (classId << 16) | methodId;

/** Unasked frames: content (no id), basic.deliver, basic.return, the content header (60), basic.ack, basic.nack, basic.cancel, channel.close. */
const NOTIFICATIONS = new Set<number | undefined>([undefined, method(60, 60), method(60, 50), 60, method(60, 80), method(60, 120), method(60, 30), method(20, 40)]);

interface ChannelInternals {
  reply: unknown;
  accept(frame: { id?: number }): void;
}

/**
 * amqplib passes any other frame to the RPC reply it waits for, without checking there is one:
 * RabbitMQ 3.10 answers a basic.cancel twice when its quorum queue is deleted meanwhile, and the
 * second ("reply is not a function") tore the connection down. It carries nothing: dropped.
 */
export function ignoreUnsolicitedReplies(channel: Channel, onDropped?: (method: number | undefined) => void): void {
  const internals = channel as unknown as ChannelInternals;
  const accept = internals.accept;
  // An own property: amqplib replaces it when the channel starts closing, which ends this guard.
  internals.accept = function (this: ChannelInternals, frame) {
    if (this.reply === null && !NOTIFICATIONS.has(frame.id)) {
      onDropped?.(frame.id);
      return;
    }
    accept.call(this, frame);
  };
}

/** Cancels the channel's consumers, then closes it: RabbitMQ 3.10 keeps a stream consumer closed without basic.cancel. */
export async function cancelAndClose(channel: Channel, consumerTags: Iterable<string>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  await within(timeoutMs, Promise.all([...consumerTags].map((tag) => channel.cancel(tag).catch(() => {}))));
  await within(deadline - Date.now(), channel.close().catch(() => {}));
}
