import { subscribe } from 'node:diagnostics_channel';
import type { Socket } from 'node:net';

/** The connection a request went out on, as it was when its first byte was written. */
export interface SentOn {
  socket: Socket;
  /** An earlier request went out on this socket: a kept-alive connection, reused. */
  reused: boolean;
  /** socket.bytesRead then: unchanged later means not one byte of this request's response came. */
  bytesRead: number;
}

export interface SendWatcher {
  sentOn(connection: SentOn): void;
}

/** Sockets a request has gone out on. */
const carried = new WeakSet<Socket>();
let armed: SendWatcher | undefined;
let subscribed = false;

/**
 * Tells `watcher` which connection its request goes out on. Called from the handler's onConnect:
 * undici publishes `undici:client:sendHeaders` synchronously after it, before the request's first
 * byte, so the next message is this request's (undici gives a handler no socket otherwise).
 */
export function watchSend(watcher: SendWatcher): void {
  if (!subscribed) {
    subscribed = true;
    subscribe('undici:client:sendHeaders', (message) => {
      const { socket } = message as { socket: Socket };
      const reused = carried.has(socket);
      carried.add(socket);
      const watching = armed;
      armed = undefined;
      watching?.sentOn({ socket, reused, bytesRead: socket.bytesRead });
    });
  }
  armed = watcher;
}
