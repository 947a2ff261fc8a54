import type { ChannelModel } from 'amqplib';

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
