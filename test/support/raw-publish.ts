import { createRequire } from 'node:module';
import type { ChannelModel } from 'amqplib';

const require = createRequire(import.meta.url);
// amqplib's own encoders, by file (the package exports only its API): its publish encodes headers in
// a 64 KiB buffer, where other clients (pika, the Java client) send up to the frame size.
const lib = (file: string) => require(require.resolve('amqplib').replace(/channel_api\.js$/, `lib/${file}`));
const defs = lib('defs.js') as { encodeMethod(id: number, channel: number, fields: Record<string, unknown>): Buffer; BasicPublish: number };
const codec = lib('codec.js') as { encodeTable(buffer: Buffer, value: Record<string, unknown>, offset: number): number };
const frame = lib('frame.js') as { makeBodyFrame(channel: number, payload: Buffer): Buffer };

interface Internals {
  ch: number;
  connection: { channels: Array<{ buffer: { write(bytes: Buffer): boolean } }> };
  pushConfirmCallback(cb: (err: Error | null) => void): void;
}

/**
 * Publishes persistent JSON with `headers` as a client without amqplib's 64 KiB bound on them would
 * (up to the negotiated frame size, 128 KiB), and waits for the broker's confirm. A Buffer
 * `messageId` goes as its bytes (any: invalid UTF-8, a NUL), as a client that sends bytes would; so
 * does a Buffer of `headers`, a field table as the frame carries it (fieldTable builds one).
 */
export async function publishWithLargeHeaders(connection: ChannelModel, exchange: string, routingKey: string, body: Buffer, messageId: string | Buffer, headers: Record<string, string> | Buffer): Promise<void> {
  const channel = await connection.createConfirmChannel();
  channel.on('error', () => {});
  try {
    const raw = channel as unknown as Internals;
    const method = defs.encodeMethod(defs.BasicPublish, raw.ch, { exchange, routingKey, mandatory: false, immediate: false, ticket: 0 });
    const table = Buffer.isBuffer(headers) ? headers : Buffer.alloc(1 << 20);
    const tableLength = Buffer.isBuffer(headers) ? headers.length : codec.encodeTable(table, headers, 0);
    const contentType = Buffer.from('application/json');
    const id = Buffer.from(messageId);
    const payload = Buffer.alloc(14 + 1 + contentType.length + tableLength + 1 + 1 + id.length);
    let at = payload.writeUInt16BE(60, 0);
    at = payload.writeUInt16BE(0, at);
    at = payload.writeBigUInt64BE(BigInt(body.length), at);
    // contentType, headers, deliveryMode, messageId: the flags in the order the properties follow.
    at = payload.writeUInt16BE(0x8000 | 0x2000 | 0x1000 | 0x0080, at);
    at = payload.writeUInt8(contentType.length, at);
    at += contentType.copy(payload, at);
    at += table.copy(payload, at, 0, tableLength);
    at = payload.writeUInt8(2, at);
    at = payload.writeUInt8(id.length, at);
    id.copy(payload, at);
    const header = Buffer.alloc(8 + payload.length);
    header.writeUInt8(2, 0);
    header.writeUInt16BE(raw.ch, 1);
    header.writeUInt32BE(payload.length, 3);
    payload.copy(header, 7);
    header.writeUInt8(0xce, 7 + payload.length);
    const confirmed = new Promise<void>((resolve, reject) => raw.pushConfirmCallback((err) => (err ? reject(err) : resolve())));
    raw.connection.channels[raw.ch]!.buffer.write(Buffer.concat([method, header, frame.makeBodyFrame(raw.ch, body)]));
    await confirmed;
  } finally {
    await channel.close().catch(() => {});
  }
}

/** A field table of string values whose keys are any bytes (amqplib's encoder takes only strings). */
export function fieldTable(entries: ReadonlyArray<[key: Buffer, value: string]>): Buffer {
  const parts = entries.flatMap(([key, value]) => {
    const bytes = Buffer.from(value);
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    return [Buffer.from([key.length]), key, Buffer.from('S'), length, bytes];
  });
  const body = Buffer.concat(parts);
  const size = Buffer.alloc(4);
  size.writeUInt32BE(body.length);
  return Buffer.concat([size, body]);
}
