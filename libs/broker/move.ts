import type { MessageProperties, Options } from 'amqplib';
import type { BrokerConnection } from './connection.js';
import { BrokerUnavailableError, BrokerUnroutableError } from './errors.js';

/** A message held by its reader until its copy is safe elsewhere: a delivery, or a message taken with get. */
export interface HeldMessage {
  content: Buffer;
  properties: MessageProperties;
  /** False once the channel it came on is gone: the broker has already returned it to its queue. */
  readonly live: boolean;
  ack(): void;
  nack(requeue: boolean): void;
}

/**
 * The properties a copy is published with: the message's own, with `headers`. Not user-id (the
 * broker checks it against this connection's user) nor expiration (a copy must not expire on its
 * way). A message without a messageId takes its webhook-id, so every copy names the same webhook.
 */
export function copyProperties(properties: Partial<MessageProperties>, headers: Record<string, string | number | boolean>, webhookId?: string): Options.Publish {
  return {
    persistent: true,
    contentType: properties.contentType ?? 'application/json',
    contentEncoding: properties.contentEncoding,
    headers,
    priority: properties.priority,
    correlationId: properties.correlationId,
    replyTo: properties.replyTo,
    messageId: properties.messageId ?? webhookId,
    timestamp: properties.timestamp,
    type: properties.type,
    appId: properties.appId,
  };
}

export interface MoveOptions {
  /** Waits between tries of a publish the broker did not take; after the last the message goes back to its queue. */
  backoffMs: readonly number[];
  /** The headers of each try: a wait's copy takes a new copy id per try. */
  headers: () => Record<string, string | number | boolean>;
  webhookId?: string;
  /** Work that must follow the confirmed publish and precede the ack (a journal entry). */
  afterPublish?: (properties: Options.Publish) => Promise<void>;
  /** Gives up at once when it turns true (stopping). */
  givingUp?: () => boolean;
  onRetry?: (err: Error, retry: number, giveUp: boolean) => void;
  deadlineMs?: number;
}

export type MoveResult = 'moved' | 'requeued' | 'channel-lost';

/**
 * The one move: publish a copy (mandatory, confirmed), then ack the original. A crash in between
 * duplicates the message, never loses it. Nothing is published for a message whose channel is
 * gone: the broker has already returned it, and a copy would make two. A publish the broker
 * refuses or whose outcome is unknown (unroutable, nacked, channel lost, deadline) is tried again
 * with backoff while the original stays unacked, then the original goes back to its queue once
 * (a delivery limit ends any loop): never a requeue in a loop. Other errors are thrown.
 */
export async function moveMessage(broker: BrokerConnection, held: HeldMessage, queue: string, options: MoveOptions): Promise<MoveResult> {
  for (let retry = 0; ; retry++) {
    const publish = copyProperties(held.properties, options.headers(), options.webhookId);
    if (!held.live) return 'channel-lost';
    try {
      await broker.sendToQueue(queue, held.content, publish, options.deadlineMs);
      await options.afterPublish?.(publish);
      held.ack();
      return 'moved';
    } catch (err) {
      if (!(err instanceof BrokerUnavailableError || err instanceof BrokerUnroutableError)) throw err;
      const giveUp = retry >= options.backoffMs.length || (options.givingUp?.() ?? false);
      options.onRetry?.(err, retry, giveUp);
      // No queue took it: an operator deleted it. Declared again, the next try lands.
      if (err instanceof BrokerUnroutableError && !giveUp) await broker.declareAgain().catch(() => {});
      if (giveUp) {
        if (held.live) held.nack(true);
        return 'requeued';
      }
      await new Promise((resolve) => setTimeout(resolve, options.backoffMs[retry]));
    }
  }
}
