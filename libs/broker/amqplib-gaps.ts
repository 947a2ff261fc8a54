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
