import type { Channel, ChannelModel } from 'amqplib';
import { within } from '../runtime/timers.js';

/** Cuts a connection whose close the broker did not answer; with an error, so amqplib stops its heartbeat and settles its waiters. */
export function destroy(model: ChannelModel): void {
  (model as unknown as { connection?: { stream?: { destroy?: (err: Error) => void } } }).connection?.stream?.destroy?.(
    new Error('closed by the client: the broker did not answer in time'),
  );
}

/** amqplib gives a refused login no code, only the broker's close frame in its message. */
export function isAccessRefused(err: unknown): boolean {
  return err instanceof Error && /^Handshake terminated by server: 403\b/.test(err.message);
}

interface Muxed {
  connection?: { stream?: { cork?: () => void; uncork?: () => void }; muxer?: { _readIncoming?: () => void } };
}

/** amqplib writes each frame on its own: corked across one run of its muxer, a turn's frames go out as one writev. */
export function coalesceWrites(model: ChannelModel): void {
  const { stream, muxer } = (model as unknown as Muxed).connection ?? {};
  const read = muxer?._readIncoming;
  if (!stream?.cork || !stream.uncork || typeof read !== 'function') return;
  muxer!._readIncoming = function readCorked(this: unknown) {
    stream.cork!();
    try {
      read.call(this);
    } finally {
      stream.uncork!();
    }
  };
}

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
