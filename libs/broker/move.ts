import type { MessageProperties, Options } from 'amqplib';
import type { BrokerConnection } from './connection.js';
import type { Delivery } from './consumers.js';
import { BrokerUnavailableError, BrokerUnroutableError } from './errors.js';

/** A message held by its reader until its copy is safe elsewhere. */
export interface HeldMessage extends Pick<Delivery, 'live' | 'ack' | 'nack'> {
  content: Buffer;
  properties: MessageProperties;
}

/** The short-string properties a copy carries when they fit. */
const CARRIED = ['contentType', 'contentEncoding', 'correlationId', 'replyTo', 'messageId', 'type', 'appId'] as const;

/** A copy's properties: the message's own with `headers`, not user-id (the broker checks it) nor expiration. */
export function copyProperties(properties: Partial<MessageProperties>, headers: Record<string, string | number | boolean>, webhookId?: string): Options.Publish {
  const { priority, timestamp } = properties;
  const copy: Options.Publish = { persistent: true, headers, priority, timestamp };
  for (const key of CARRIED) copy[key] = carried(properties[key]);
  copy.contentType ??= 'application/json';
  copy.messageId ??= carried(webhookId);
  return copy;
}

/** A short-string property a copy can hold (≤ 255 bytes: bytes read as U+FFFD may have tripled), else none. */
function carried(value: unknown): string | undefined {
  return typeof value === 'string' && Buffer.byteLength(value) <= 255 ? value : undefined;
}

export interface MoveOptions {
  /** Waits between tries; after the last the message goes back to its queue. */
  backoffMs: readonly number[];
  headers: () => Record<string, string | number | boolean>;
  webhookId?: string;
  /** Between the confirmed publish and the ack (a journal entry). */
  afterPublish?: (properties: Options.Publish) => Promise<void>;
  givingUp?: () => boolean;
  onRetry?: (err: Error, retry: number, giveUp: boolean) => void;
  /** Each try's wait for its confirm; none: as long as the broker takes. */
  deadlineMs?: number;
}

export type MoveResult = 'moved' | 'requeued' | 'channel-lost';

/**
 * Publishes a copy, then acks the original: a crash in between duplicates, never loses. A refused
 * publish is tried again with backoff, then the original is requeued once. Other errors throw.
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
      if (err instanceof BrokerUnroutableError && !giveUp) await broker.declareAgain().catch(() => {});
      if (giveUp) {
        if (held.live) held.nack(true);
        return 'requeued';
      }
      await new Promise((resolve) => setTimeout(resolve, options.backoffMs[retry]));
    }
  }
}

/** `send`, tried once more after declaring the topology again when no queue took it (a deleted queue or binding). */
export async function sendDeclaring(broker: Pick<BrokerConnection, 'declareAgain'>, send: () => Promise<void>): Promise<void> {
  try {
    await send();
  } catch (err) {
    if (!(err instanceof BrokerUnroutableError)) throw err;
    await broker.declareAgain().catch(() => {});
    await send();
  }
}
