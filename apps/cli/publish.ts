import { readFile } from 'node:fs/promises';
import { EVENT_NAMES, type EventName, isEventName, sampleEvent, type UpstreamMessage } from '../../libs/contracts/index.js';
import type { EventPublisher } from '../../libs/publisher/index.js';
import { UsageError } from './errors.js';

export interface PublishArgs {
  sample?: string;
  file?: string;
  merchant?: string;
  count: number;
  messageId?: string;
}

/** Publishes a file's event or built-in samples; returns one line per event for the terminal. */
export async function publishCommand(publisher: EventPublisher, args: PublishArgs): Promise<string[]> {
  const messages: UpstreamMessage[] = [];
  if (args.file) {
    let json: unknown;
    try {
      json = JSON.parse(await readFile(args.file, 'utf8'));
    } catch (err) {
      throw new UsageError(`cannot read ${args.file} as JSON: ${(err as Error).message}`);
    }
    for (let i = 0; i < args.count; i++) messages.push(json as UpstreamMessage);
  } else if (args.sample) {
    if (!args.merchant) throw new UsageError('--sample needs --merchant <id>');
    const events: EventName[] = args.sample === 'all' ? [...EVENT_NAMES] : isEventName(args.sample) ? [args.sample] : [];
    if (events.length === 0) throw new UsageError(`--sample takes one of ${EVENT_NAMES.join(', ')} or all`);
    for (let i = 0; i < args.count; i++) for (const event of events) messages.push(sampleEvent(event, args.merchant));
  } else {
    throw new UsageError('publish needs --sample <event|all> --merchant <id>, or --file <event.json>');
  }
  if (args.messageId && messages.length > 1) throw new UsageError('--message-id publishes a single event');

  const lines: string[] = [];
  for (const message of messages) {
    let result;
    try {
      result = await publisher.publish(message, { messageId: args.messageId });
    } catch (err) {
      if ((err as Error).name === 'ZodError') throw new UsageError(`not a valid event: ${(err as Error).message}`);
      throw err;
    }
    lines.push(`published ${result.routingKey} ${result.messageId}`);
  }
  return lines;
}
