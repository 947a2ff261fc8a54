import { once } from 'node:events';
import { type AddressInfo, createServer, type Socket, connect } from 'node:net';

/**
 * A TCP proxy in front of the broker that can freeze: connections stay open but nothing passes
 * either way any more, as with a broker that stopped answering (a hung node, a black-holed route).
 */
export class FrozenProxy {
  private frozen = false;
  private readonly sockets = new Set<Socket>();
  /** Sockets frozen by freezeOpen(): those open then; later connections pass. */
  private readonly frozenSockets = new Set<Socket>();
  /** Set by dropReplies(): what the server sends is dropped, what the client sends still passes. */
  private droppingReplies = false;
  private readonly upstreams = new Set<Socket>();

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
      proxy!.upstreams.add(upstream);
      upstream.on('close', () => proxy!.upstreams.delete(upstream));
      for (const socket of [client, upstream]) {
        proxy!.sockets.add(socket);
        socket.on('error', () => {});
        socket.on('close', () => proxy!.sockets.delete(socket));
      }
      const relay = (from: Socket, to: Socket) =>
        from.on('data', (chunk) => {
          if (!proxy!.frozen && !proxy!.frozenSockets.has(from) && !(proxy!.droppingReplies && proxy!.upstreams.has(from))) to.write(chunk);
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
   * What the server answers is dropped from now on (the client's statements still reach it and
   * commit), on every connection, new ones too: the answers lost on their way back.
   */
  dropReplies(): void {
    this.droppingReplies = true;
  }

  /** Every connection reset (its statements' answers never came), and new ones pass again. */
  cut(): void {
    this.droppingReplies = false;
    for (const socket of this.sockets) socket.destroy();
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
