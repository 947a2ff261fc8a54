import { once } from 'node:events';
import { type AddressInfo, createServer, type Socket, connect } from 'node:net';

/**
 * A TCP proxy in front of the broker that can freeze: connections stay open but nothing passes
 * either way any more, as with a broker that stopped answering (a hung node, a black-holed route).
 */
/** The simple-protocol query `COMMIT` as node-postgres sends it (its text, NUL-terminated). */
const COMMIT = Buffer.from('COMMIT\0');

/** AMQP 0-9-1: a method frame (type 1) of basic (class 60): ack (80) or nack (120), a publisher confirm. */
function isConfirm(frame: Buffer): boolean {
  if (frame[0] !== 1 || frame.length < 11) return false;
  const [klass, method] = [frame.readUInt16BE(7), frame.readUInt16BE(9)];
  return klass === 60 && (method === 80 || method === 120);
}

export class FrozenProxy {
  private frozen = false;
  private readonly sockets = new Set<Socket>();
  /** Sockets frozen by freezeOpen(): those open then; later connections pass. */
  private readonly frozenSockets = new Set<Socket>();
  /** Set by dropRepliesAfterCommit(): a connection whose client then sends a COMMIT gets no answer any more. */
  private mutingAfterCommit = false;
  /** The server's side of those connections: what it sends is dropped, what the client sends still passes. */
  private readonly muted = new Set<Socket>();
  /** Set by dropConfirms(): the broker's publisher confirms never reach the client. */
  private droppingConfirms = false;
  /** Bytes the server sent on: a test can wait until a client's work is under way (nothing else shows it). */
  received = 0;

  private constructor(
    private readonly server: ReturnType<typeof createServer>,
    readonly url: string,
  ) {}

  /** `port`: listen there (a port a program was told to use before the proxy was up); any free one by default. */
  static async start(brokerUrl: string, port = 0): Promise<FrozenProxy> {
    const target = new URL(brokerUrl);
    let proxy: FrozenProxy | undefined;
    const server = createServer((client) => {
      const upstream = connect(Number(target.port || 5672), target.hostname);
      upstream.on('close', () => proxy!.muted.delete(upstream));
      for (const socket of [client, upstream]) {
        proxy!.sockets.add(socket);
        socket.on('error', () => {});
        socket.on('close', () => proxy!.sockets.delete(socket));
      }
      // The broker's side as frames from its first byte (type, channel, size of 4 bytes, payload, 0xCE), for dropConfirms().
      let pending = Buffer.alloc(0);
      const withoutConfirms = (chunk: Buffer): Buffer => {
        pending = Buffer.concat([pending, chunk]);
        const kept: Buffer[] = [];
        while (pending.length >= 7 && pending.length >= 8 + pending.readUInt32BE(3)) {
          const frame = pending.subarray(0, 8 + pending.readUInt32BE(3));
          pending = pending.subarray(frame.length);
          if (!isConfirm(frame)) kept.push(frame);
        }
        return Buffer.concat(kept);
      };
      const relay = (from: Socket, to: Socket) =>
        from.on('data', (chunk: Buffer) => {
          // node-postgres ends a transaction with the simple query `COMMIT`: it reaches the server and
          // commits, and its answer (and every later one on that connection) is lost on the way back.
          if (proxy!.mutingAfterCommit && from === client && chunk.includes(COMMIT)) proxy!.muted.add(upstream);
          if (proxy!.frozen || proxy!.frozenSockets.has(from) || proxy!.muted.has(from)) return;
          if (from === upstream) proxy!.received += chunk.length;
          to.write(proxy!.droppingConfirms && from === upstream ? withoutConfirms(chunk) : chunk);
        });
      relay(client, upstream);
      relay(upstream, client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    server.listen(port, '127.0.0.1');
    await once(server, 'listening');
    const url = new URL(brokerUrl);
    url.hostname = '127.0.0.1';
    url.port = String((server.address() as AddressInfo).port);
    proxy = new FrozenProxy(server, url.toString());
    return proxy;
  }

  freeze(): void {
    this.frozen = true;
  }

  /** Only the connections open now freeze; new ones pass (a failover: the old host gone silent, the new one up). */
  freezeOpen(): void {
    for (const socket of this.sockets) this.frozenSockets.add(socket);
  }

  /**
   * From now on, a connection whose client sends a COMMIT (PostgreSQL's) gets no answer any more:
   * the transaction commits, and the client never hears so (a server that crashed just after its
   * commit, a connection cut then). Other connections pass until they commit too.
   */
  dropRepliesAfterCommit(): void {
    this.mutingAfterCommit = true;
  }

  /**
   * From a connection's first byte on (call it before connecting): everything passes but the broker's
   * publisher confirms (basic.ack and basic.nack to the client), so publishes are stored, heartbeats
   * flow and none is ever confirmed: a broker whose memory or disk alarm blocks its publishers,
   * without raising one on the shared broker.
   */
  dropConfirms(): void {
    this.droppingConfirms = true;
  }

  /** Every connection reset (its statements' answers never came), and new ones pass again. */
  cut(): void {
    this.mutingAfterCommit = false;
    this.muted.clear();
    for (const socket of this.sockets) socket.destroy();
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
