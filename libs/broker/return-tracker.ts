import type { Channel, Message } from 'amqplib';

interface Pending {
  exchange: string;
  routingKey: string;
  content: Buffer;
  returned?: string;
}

/** Matches a basic.return (no delivery tag) to the oldest unconfirmed publish with its exchange, routing key and body. */
export class ReturnTracker {
  private readonly pending = new Set<Pending>();

  constructor(channel: Channel) {
    channel.on('return', (message: Message) => this.onReturn(message));
  }

  expect(exchange: string, routingKey: string, content: Buffer): Pending {
    const entry: Pending = { exchange, routingKey, content };
    this.pending.add(entry);
    return entry;
  }

  /** Forgets the publish; the broker's reply text if it was returned. */
  settle(entry: Pending): string | undefined {
    this.pending.delete(entry);
    return entry.returned;
  }

  private onReturn(message: Message): void {
    const fields = message.fields as Message['fields'] & { replyText?: string; exchange: string; routingKey: string };
    for (const entry of this.pending) {
      if (entry.returned === undefined && entry.exchange === fields.exchange && entry.routingKey === fields.routingKey && entry.content.equals(message.content)) {
        entry.returned = fields.replyText ?? 'NO_ROUTE';
        return;
      }
    }
  }
}
