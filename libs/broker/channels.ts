import type { Channel } from 'amqplib';

/** An AMQP method's frame id as amqplib numbers it (amqplib does not export its table). */
const method = (classId: number, methodId: number) => (classId << 16) | methodId;

/**
 * Frames a channel receives without having asked: content (no id), basic.deliver, basic.return,
 * the content header (amqplib gives it the class id, 60), basic.ack, basic.nack, the broker's
 * basic.cancel and channel.close.
 */
const NOTIFICATIONS = new Set<number | undefined>([undefined, method(60, 60), method(60, 50), 60, method(60, 80), method(60, 120), method(60, 30), method(20, 40)]);

interface ChannelInternals {
  reply: unknown;
  accept(frame: { id?: number }): void;
}

/**
 * amqplib (2.3) takes every other frame as the answer to the RPC the channel is waiting for and
 * calls that answer's handler without checking there is one. RabbitMQ 3.10 answers a basic.cancel
 * twice (two basic.cancel-ok) when the quorum queue is deleted while the cancel is in flight
 * (measured: 3 times in 40 tries). The second has no handler: "reply is not a function" is thrown
 * out of the frame loop and amqplib tears the whole connection down, every channel with it. A
 * reply nobody waits for carries nothing to act on, so it is dropped here instead.
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

/** Settles with the promise, or with undefined once `ms` have passed: a shutdown step that cannot hang. */
export function within<T>(ms: number, promise: Promise<T>): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), Math.max(0, ms));
      timer.unref();
    }),
  ]);
}

/**
 * Cancels the channel's consumers, then closes it. RabbitMQ 3.10 keeps a stream consumer whose
 * channel closed without basic.cancel registered on the queue, even after its connection closed
 * (measured: 10 reads, 10 consumers left on the stream; cancelled first, 0). Every close of a
 * consuming channel goes through here. Bounded: a broker that does not answer costs `timeoutMs`
 * at most, and the connection's close takes the channel with it.
 */
export async function cancelAndClose(channel: Channel, consumerTags: Iterable<string>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  await within(timeoutMs, Promise.all([...consumerTags].map((tag) => channel.cancel(tag).catch(() => {}))));
  await within(deadline - Date.now(), channel.close().catch(() => {}));
}
