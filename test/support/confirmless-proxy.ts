import { once } from 'node:events';
import { type AddressInfo, createServer, type Socket, connect } from 'node:net';

/** AMQP 0-9-1: a method frame (type 1) of basic (class 60): ack (80) or nack (120). */
function isConfirm(frame: Buffer): boolean {
  if (frame[0] !== 1 || frame.length < 11) return false;
  const [klass, method] = [frame.readUInt16BE(7), frame.readUInt16BE(9)];
  return klass === 60 && (method === 80 || method === 120);
}

/**
 * A TCP proxy in front of the broker that passes everything but the broker's publisher confirms
 * (basic.ack and basic.nack to the client): publishes are stored, heartbeats flow, the connection
 * stays up, and no publish is ever confirmed. What a client sees of a broker whose memory or disk
 * alarm blocks its publishers, without raising one on the shared broker.
 */
export class ConfirmlessProxy {
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: ReturnType<typeof createServer>,
    readonly url: string,
  ) {}

  static async start(brokerUrl: string): Promise<ConfirmlessProxy> {
    const target = new URL(brokerUrl);
    let proxy: ConfirmlessProxy | undefined;
    const server = createServer((client) => {
      const upstream = connect(Number(target.port || 5672), target.hostname);
      for (const socket of [client, upstream]) {
        proxy!.sockets.add(socket);
        socket.on('error', () => {});
        socket.on('close', () => proxy!.sockets.delete(socket));
      }
      client.pipe(upstream);
      // The broker's side is frames from its first byte: type, channel, size (4 bytes), payload, 0xCE.
      let pending = Buffer.alloc(0);
      upstream.on('data', (chunk: Buffer) => {
        pending = Buffer.concat([pending, chunk]);
        while (pending.length >= 7 && pending.length >= 8 + pending.readUInt32BE(3)) {
          const frame = pending.subarray(0, 8 + pending.readUInt32BE(3));
          pending = pending.subarray(frame.length);
          if (!isConfirm(frame)) client.write(frame);
        }
      });
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const url = new URL(brokerUrl);
    url.hostname = '127.0.0.1';
    url.port = String((server.address() as AddressInfo).port);
    proxy = new ConfirmlessProxy(server, url.toString());
    return proxy;
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    this.server.close();
    await once(this.server, 'close').catch(() => {});
  }
}
