import type { Channel, ConsumeMessage } from 'amqplib';

/** A delivery bound to the channel it came on: acking on a newer channel would close it (406). */
export interface Delivery {
  message: ConsumeMessage;
  /** False once the channel it came on is gone: the broker has already returned it to its queue. */
  readonly live: boolean;
  ack(): void;
  /** Requeue only for transient broker trouble, never in a loop. */
  nack(requeue: boolean): void;
}

export interface ConsumeOptions {
  prefetch: number;
  /** Computed at every (re)connect, e.g. a stream offset to resume from. */
  arguments?: () => Record<string, unknown>;
  onMessage: (delivery: Delivery) => void;
}

export interface Consumer {
  /** Stops new deliveries; those handed out can still be acked. */
  cancel(): Promise<void>;
  /** Cancels, then closes the channel: safe twice. */
  close(): Promise<void>;
}

export interface ReaderOptions {
  prefetch: number;
  arguments?: Record<string, unknown>;
  /** Each entry, acked already; null when the broker cancelled the read (the queue was deleted). */
  onMessage(message: ConsumeMessage | null): void;
  onClose?(): void;
}

export type Reader = Pick<Consumer, 'close'>;

export interface ConsumerState {
  queue: string;
  options: ConsumeOptions;
  channel?: Channel;
  tag?: string;
  /** The start under way or last made (a reconnect's): a cancel waits for it. */
  starting?: Promise<void>;
  cancelled: boolean;
}
