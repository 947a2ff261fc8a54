import type { Channel, Message } from 'amqplib';

/**
 * Coalesces one consumer channel's acks: those of one event-loop turn go out as one `multiple` ack
 * up to the highest tag with nothing unsettled below it, the rest one by one. Fewer frames (each
 * quorum-queue ack is a Raft command), and a slow delivery never holds back the acks of later ones.
 */
export class AckBatcher {
  /** Lowest delivery tag not yet settled with the broker (tags start at 1 on every channel). */
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

  /**
   * A basic.reject, not a basic.nack: RabbitMQ 4.3 counts a nack's return toward no delivery limit
   * (a reject's, like a crash's, it does; 3.10 to 4.2 count both), so every return to `dispatch`
   * stays bounded by its x-delivery-limit. Without requeue both dead-letter the same way.
   */
  nack(tag: number, requeue: boolean): void {
    this.flush();
    this.settled.add(tag);
    try {
      this.channel.reject(asMessage(tag), requeue);
    } catch {
      // The channel is gone: as in flush().
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
