import type { Channel, Message } from 'amqplib';

/** Coalesces a channel's acks: a turn's go out as one `multiple` ack where nothing unsettled is below, the rest one by one. */
export class AckBatcher {
  /** Lowest delivery tag not yet settled (tags start at 1 on every channel). */
  private floor = 1;
  private readonly done = new Set<number>();
  private readonly settled = new Set<number>();
  private scheduled = false;

  constructor(private readonly channel: Channel) {}

  ack(tag: number): void {
    this.done.add(tag);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  /** A basic.reject, not a nack: RabbitMQ 4.3 counts only a reject's return toward the x-delivery-limit. */
  nack(tag: number, requeue: boolean): void {
    this.flush();
    this.settled.add(tag);
    try {
      this.channel.reject(asMessage(tag), requeue);
    } catch {
      // As in flush().
    }
  }

  flush(): void {
    this.scheduled = false;
    let top = 0;
    while (this.done.has(this.floor) || this.settled.has(this.floor)) {
      if (this.done.delete(this.floor)) top = this.floor;
      else this.settled.delete(this.floor);
      this.floor++;
    }
    try {
      if (top) this.channel.ack(asMessage(top), true);
      for (const tag of this.done) {
        this.channel.ack(asMessage(tag), false);
        this.settled.add(tag);
      }
    } catch {
      // The channel is gone, so the broker has already returned these deliveries to the queue.
    }
    this.done.clear();
  }
}

function asMessage(deliveryTag: number): Message {
  return { fields: { deliveryTag } } as Message;
}
