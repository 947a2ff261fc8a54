import { readFile } from 'node:fs/promises';
import { PublishUnconfirmedError } from '../../libs/broker/index.js';
import { replicationOf, tracingSettingsOf } from '../../libs/config/index.js';
import { EVENT_NAMES, type EventName, isEventName, isWellFormedReference, isWellFormedWebhookId, REFERENCE_FIELDS, sampleEvent, type UpstreamMessage, upstreamMessageSchema, WEBHOOK_ID_RULE } from '../../libs/contracts/index.js';
import { EventPublisher, newEventId } from '../../libs/publisher/index.js';
import { declareIntake } from '../../libs/topology/index.js';
import { startTracing } from '../../libs/tracing/index.js';
import { CLI_BROKER_DEADLINE_MS, withBroker } from './broker.js';
import { CliCommand, type CliContext, EXIT, UsageError, wholeNumber, writeLine } from './command.js';

export function declarePublish(program: CliCommand): void {
  program
    .command('publish')
    .summary('publish sample events or your own, as upstream services do')
    .usage('--sample <event|all> --merchant <id> [--count N]\n       webhooks publish --file <event.json> [--message-id <id>]')
    .description(
      'Publishes events to <TOPOLOGY_PREFIX>.events as upstream services do (persistent, with a publisher ' +
        'confirm), after checking their shape as the dispatcher will: an event it would park as malformed is refused here. ' +
        'Whether the merchant exists is not checked (that is in PostgreSQL): an unknown merchant\'s events are parked as unknown-merchant.',
    )
    .option('--sample <event>', `a built-in sample: ${EVENT_NAMES.join(', ')}, or all`)
    .option('--merchant <id>', 'the merchant of the samples')
    .option('--file <path>', 'your own event: {"merchantId": ..., "event": ..., "data": {...}}')
    .option('--message-id <id>', `the event id, which merchants see as webhook-id (default: evt_<uuid>); ${WEBHOOK_ID_RULE}`)
    .option('--count <n>', 'publish it N times (1 to 100000), each with its own id', '1')
    .addHelpText(
      'after',
      '\nIt declares <TOPOLOGY_PREFIX>.events and <TOPOLOGY_PREFIX>.dispatch (and their binding) when they are\n' +
        'missing, so an event published before the programs first ran is kept; it declares nothing else.\n' +
        'Export the TOPOLOGY_PREFIX the programs run with, or the events go to another topology.\n' +
        EXIT,
    )
    .handle(check, run);
}

function check(raw: { sample?: string; merchant?: string; file?: string; messageId?: string; count: string }) {
  const count = wholeNumber(raw.count, 100_000, '--count takes a whole number from 1 to 100000');
  if (raw.messageId !== undefined) {
    if (!isWellFormedWebhookId(raw.messageId)) throw new UsageError(`--message-id must be ${WEBHOOK_ID_RULE}; not "${raw.messageId}"`);
    if (count > 1 || raw.sample === 'all') throw new UsageError('--message-id publishes a single event');
  }
  if (raw.file !== undefined && raw.sample !== undefined) throw new UsageError('give --sample or --file, not both');
  if (raw.file !== undefined) return { file: raw.file, messageId: raw.messageId, count };
  if (raw.sample === undefined) throw new UsageError('publish needs --sample <event|all> --merchant <id>, or --file <event.json>');
  const sample: EventName[] | undefined = raw.sample === 'all' ? [...EVENT_NAMES] : isEventName(raw.sample) ? [raw.sample] : undefined;
  if (!sample) throw new UsageError(`--sample takes one of ${EVENT_NAMES.join(', ')} or all; not ${raw.sample}`);
  if (!raw.merchant) throw new UsageError('--sample needs --merchant <id>');
  // The dispatcher's rule, checked before the broker is opened: else a schema dump after connecting (exit 1).
  const merchant = upstreamMessageSchema.shape.merchantId.safeParse(raw.merchant);
  if (!merchant.success) throw new UsageError(`--merchant ${merchant.error.issues[0]!.message}`);
  return { sample, merchant: raw.merchant, messageId: raw.messageId, count };
}

async function run(options: ReturnType<typeof check>, ctx: CliContext): Promise<void> {
  const file = options.file === undefined ? undefined : await readEvent(options.file);
  const messages = Array.from({ length: options.count }, () => (file ? [file] : options.sample!.map((event) => sampleEvent(event, options.merchant!)))).flat();
  const config = ctx.config;
  return withBroker(config, [], async (broker) => {
    const tracing = await startTracing(tracingSettingsOf(config, 'webhooks-cli'));
    try {
      const publisher = new EventPublisher(broker, config.TOPOLOGY_PREFIX);
      for (const message of messages) {
        // Named here, so that one whose confirm never comes can be named.
        const messageId = options.messageId ?? newEventId();
        const result = await publisher.publish(message, { messageId, deadlineMs: CLI_BROKER_DEADLINE_MS }).catch((err: unknown) => {
          if (!(err instanceof PublishUnconfirmedError)) throw err;
          throw new Error(`RabbitMQ did not confirm ${messageId} within ${err.deadlineMs} ms (a memory or disk alarm blocks publishers?): it may still be published`);
        });
        writeLine(ctx.stdout, `published ${result.routingKey} ${result.messageId}`);
      }
    } finally {
      await tracing.shutdown();
    }
  }, (openChannel) => declareIntake(openChannel, config.TOPOLOGY_PREFIX, replicationOf(config)));
}

/** The file's event, refused with the rule when the dispatcher would park it or a resend could not find it. */
async function readEvent(file: string): Promise<UpstreamMessage> {
  const json: unknown = await readFile(file, 'utf8')
    .then((text) => JSON.parse(text))
    .catch((err: Error) => {
      throw new UsageError(`cannot read ${file} as JSON: ${err.message}`);
    });
  const parsed = upstreamMessageSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new UsageError(`not a valid event: ${issue.path.join('.') || 'the body'}: ${issue.message}`);
  }
  const { event, data } = parsed.data;
  const fields = REFERENCE_FIELDS[event];
  const given = fields.filter((field) => data[field] !== undefined);
  for (const field of given) {
    const value = data[field];
    if (typeof value !== 'string' || !isWellFormedReference(value)) {
      throw new UsageError(`not a valid event: data.${field} must be a string of 1 to 200 characters without control characters or a lone surrogate`);
    }
    // The service would take it, but a resend given the reference as people write it would never find it.
    if (value !== value.trim()) throw new UsageError(`not a valid event: data.${field} "${value}" has spaces at its start or end; publish it trimmed`);
  }
  if (given.length === 0) throw new UsageError(`not a valid event: a ${event} event needs data.${fields.join(' or data.')}`);
  return json as UpstreamMessage;
}
