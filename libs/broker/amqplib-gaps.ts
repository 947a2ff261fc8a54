/** What amqplib does not give a connection of its own: a named refused login, and a way to cut it. */
import type { ChannelModel } from 'amqplib';

/**
 * Cuts a connection whose close the broker did not answer. With an error, so that amqplib takes it
 * as a lost socket: it stops its heartbeat timer and settles what waits on the connection.
 */
export function destroy(model: ChannelModel): void {
  (model as unknown as { connection?: { stream?: { destroy?: (err: Error) => void } } }).connection?.stream?.destroy?.(
    new Error('closed by the client: the broker did not answer in time'),
  );
}

/**
 * amqplib gives a refused login no code of its own, only the broker's close frame in the text
 * ("Handshake terminated by server: 403 (ACCESS-REFUSED) ..."): read here once, into a named error.
 */
export function isAccessRefused(err: unknown): boolean {
  return err instanceof Error && /^Handshake terminated by server: 403\b/.test(err.message);
}

interface Muxed {
  connection?: { stream?: { cork?: () => void; uncork?: () => void }; muxer?: { _readIncoming?: () => void } };
}

/**
 * amqplib hands the socket each frame with a write() of its own (its muxer reads the channels'
 * frames one by one), so every ack, publish and confirmable record is a syscall: on a loaded
 * machine a dispatcher spent more on those writes than on anything else of its own (BENCHMARKS.md 17).
 * Corked across one run of the muxer, what the program queued in one turn of the event loop goes
 * out as one writev. Left as it is when amqplib's insides are not what this expects.
 */
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
