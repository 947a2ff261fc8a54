import type { GetMessage } from 'amqplib';
import { type BrokerConnection, type HeldMessage, moveMessage } from '../../libs/broker/index.js';
import { copyHeaders, HEADERS } from '../../libs/contracts/index.js';
import { DISPATCH_DELIVERY_LIMIT, type TopologyNames } from '../../libs/topology/index.js';

/** A message parked in invalid, with the reason the dispatcher wrote in its headers. */
export interface ParkedMessage {
  code?: string;
  reason?: string;
  invalidAt?: string;
  originalRoutingKey?: string;
  messageId?: string;
  body: Buffer;
}

/** For --help, and why the pass below is made so. */
export const NO_REQUEUE = `How it reads the queue: every message present when the command starts is taken, handled, published
again (with a publisher confirm) and only then acknowledged. Nothing is ever returned with a
requeue: RabbitMQ 4.x quorum queues drop a message returned 20 times (delivery-limit), and a
message taken and left unacknowledged when a channel closes counts as returned. Messages keep their
order; ones parked while the command runs are left for the next run. Run one at a time per queue.`;

/**
 * Passes once over what invalid holds at the start (NO_REQUEUE): each message is put back at the
 * tail of invalid, or moved to dispatch, as `verdict` says. One message at a time, also so that acks
 * never pile up before the channel closes (quorum queues have been seen to drop acks sent just
 * before a close: rabbitmq-server#10327).
 */
export async function passOverInvalid(
  broker: BrokerConnection,
  names: TopologyNames,
  verdict: (parked: ParkedMessage) => 'keep' | 'move',
): Promise<{ kept: number; moved: number }> {
  const result = { kept: 0, moved: 0 };
  const channel = await broker.createChannel();
  try {
    const { messageCount } = await channel.checkQueue(names.invalid);
    for (let i = 0; i < messageCount; i++) {
      const message = await channel.get(names.invalid, { noAck: false });
      if (message === false) break; // someone else took the rest
      const move = verdict(parkedOf(message)) === 'move';
      const headers = copyHeaders(message.properties.headers, { from: 'parked', unpark: move });
      let refused: Error | undefined;
      const held: HeldMessage = { content: message.content, properties: message.properties, live: true, ack: () => channel.ack(message), nack: () => {} };
      // One try, no backoff: a copy not confirmed fails the pass, and the message returns to invalid once, when the channel closes.
      const moved = await moveMessage(broker, held, move ? names.dispatch : names.invalid, { backoffMs: [], headers: () => headers, onRetry: (err) => (refused = err) });
      if (moved !== 'moved') throw refused ?? new Error('parked message not moved');
      if (move) result.moved++;
      else result.kept++;
    }
  } finally {
    await channel.close().catch(() => {});
  }
  return result;
}

export function parkedOf(message: GetMessage): ParkedMessage {
  const headers = message.properties.headers ?? {};
  // The broker itself parks a message that came back from dispatch too many times (delivery-limit).
  const limited = !text(headers[HEADERS.invalidCode]) && headers['x-first-death-reason'] === 'delivery_limit';
  return {
    code: limited ? 'delivery-limit' : text(headers[HEADERS.invalidCode]),
    reason: limited
      ? `delivered ${DISPATCH_DELIVERY_LIMIT} times without an outcome: the dispatcher crashed or lost its connection holding it each time`
      : text(headers[HEADERS.invalidReason]),
    invalidAt: text(headers[HEADERS.invalidAt]) ?? (limited ? deathTime(headers) : undefined),
    originalRoutingKey: text(headers[HEADERS.originalRoutingKey]),
    messageId: text(message.properties.messageId),
    body: message.content,
  };
}

/** When the broker dead-lettered it, from x-death (3.10 and 4.x write it; the time is in seconds). */
function deathTime(headers: Record<string, unknown>): string | undefined {
  const deaths = headers['x-death'];
  const time = Array.isArray(deaths) ? (deaths[0] as { time?: { value?: number } | number })?.time : undefined;
  const seconds = typeof time === 'number' ? time : time?.value;
  return typeof seconds === 'number' ? new Date(seconds * 1000).toISOString() : undefined;
}

function text(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}
