import type { MessageProperties, Options } from 'amqplib';
import type { BrokerConnection } from './connection.js';
import type { Delivery } from './consumers.js';
import { BrokerUnavailableError, BrokerUnroutableError } from './errors.js';

/** A message held by its reader until its copy is safe elsewhere: a delivery, or a message taken with get. */
export interface HeldMessage extends Pick<Delivery, 'live' | 'ack' | 'nack'> {
  content: Buffer;
  properties: MessageProperties;
}

/**
 * A copy's properties: the message's own with `headers`, but not user-id (the broker checks it) nor
 * expiration; without a messageId, its webhook-id, so every copy names the same webhook.
 */
export function copyProperties(properties: Partial<MessageProperties>, headers: Record<string, string | number | boolean>, webhookId?: string): Options.Publish {
  return {
    persistent: true,
    contentType: carried(properties.contentType) ?? 'application/json',
    contentEncoding: carried(properties.contentEncoding),
    headers,
    priority: properties.priority,
    correlationId: carried(properties.correlationId),
    replyTo: carried(properties.replyTo),
    messageId: carried(properties.messageId) ?? carried(webhookId),
    timestamp: properties.timestamp,
    type: carried(properties.type),
    appId: carried(properties.appId),
  };
}

/**
 * A short-string property as a copy can hold it (at most 255 bytes of UTF-8), else none. The
 * client reads bytes that are not UTF-8 as U+FFFD, three bytes each: 100 such bytes from an
 * upstream became 300, which amqplib refuses to publish, so every move of that message failed and
 * requeued it until its delivery limit (a messageId parked as invalid-message-id, or a fan-out).
 */
function carried(value: unknown): string | undefined {
  return typeof value === 'string' && Buffer.byteLength(value) <= 255 ? value : undefined;
}

export interface MoveOptions {
  /** Waits between tries of a publish the broker did not take; after the last the message goes back to its queue. */
  backoffMs: readonly number[];
  /** The headers of each try. */
  headers: () => Record<string, string | number | boolean>;
  webhookId?: string;
  /** Work that must follow the confirmed publish and precede the ack (a journal entry). */
  afterPublish?: (properties: Options.Publish) => Promise<void>;
  /** Gives up at once when it turns true (stopping). */
  givingUp?: () => boolean;
  onRetry?: (err: Error, retry: number, giveUp: boolean) => void;
  /** Each try's wait for its confirm (PublishUnconfirmedError past it); none: as long as the broker takes. */
  deadlineMs?: number;
}

export type MoveResult = 'moved' | 'requeued' | 'channel-lost';

/**
 * The one move: publish a copy (mandatory, confirmed), then ack the original: a crash in between
 * duplicates, never loses. Nothing is published once the original's channel is gone (the broker
 * returned it). A refused or unknown publish is tried again with backoff while the original stays
 * unacked, then the original is requeued once (its delivery limit ends any loop). Other errors throw.
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
      // An operator deleted the queue: declared again, the next try lands.
      if (err instanceof BrokerUnroutableError && !giveUp) await broker.declareAgain().catch(() => {});
      if (giveUp) {
        if (held.live) held.nack(true);
        return 'requeued';
      }
      await new Promise((resolve) => setTimeout(resolve, options.backoffMs[retry]));
    }
  }
}

/**
 * `send` (a publish), tried once more after declaring the topology again when no queue took it
 * (an operator deleted the queue or its binding; a returned publish was stored nowhere, so the
 * second try is the only copy). A second return is the caller's.
 */
export async function sendDeclaring(broker: Pick<BrokerConnection, 'declareAgain'>, send: () => Promise<void>): Promise<void> {
  try {
    await send();
  } catch (err) {
    if (!(err instanceof BrokerUnroutableError)) throw err;
    await broker.declareAgain().catch(() => {});
    await send();
  }
}
