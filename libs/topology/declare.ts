import type { Channel } from 'amqplib';
import { topologyNames } from './names.js';

export interface TopologyOptions {
  prefix: string;
  /** One retry tier per delay, in order. */
  retryDelaysMs: readonly number[];
  /** Stream retention as RabbitMQ's x-max-age, e.g. `30D`. */
  failedRetention: string;
}

/** A queue or exchange exists with other arguments (reply 406): declaring cannot fix it, an operator must. */
export class TopologyMismatchError extends Error {
  constructor(readonly entity: string, cause: unknown) {
    super(
      `${entity} already exists with different arguments (${String((cause as Error)?.message ?? cause)}). ` +
        'If RETRY_SCHEDULE or FAILED_RETENTION changed, drain and delete the old queue, or use another TOPOLOGY_PREFIX.',
    );
    this.name = 'TopologyMismatchError';
  }
}

async function step(entity: string, declare: () => Promise<unknown>): Promise<void> {
  try {
    await declare();
  } catch (err) {
    if ((err as { code?: number }).code === 406) throw new TopologyMismatchError(entity, err);
    throw err;
  }
}

/**
 * What a publisher needs so that no event is lost even before a dispatcher ever ran: the events
 * exchange and the dispatch queue bound to it. Publishers declare only this, so they never clash
 * with the programs' retry schedule.
 */
export async function declareIntake(channel: Channel, prefix: string): Promise<void> {
  const names = topologyNames(prefix);
  await step(`exchange ${names.events}`, () => channel.assertExchange(names.events, 'topic', { durable: true }));
  await step(`queue ${names.dispatch}`, () =>
    channel.assertQueue(names.dispatch, { durable: true, arguments: { 'x-queue-type': 'quorum' } }),
  );
  await channel.bindQueue(names.dispatch, names.events, '#');
}

/**
 * Declares everything idempotently; runs at start-up and again on every reconnect.
 * A 406 closes the channel, so the first mismatch ends the declaration with a named error.
 */
export async function declareTopology(channel: Channel, options: TopologyOptions): Promise<void> {
  const names = topologyNames(options.prefix);
  await declareIntake(channel, options.prefix);
  for (const [tier, delay] of options.retryDelaysMs.entries()) {
    const queue = names.retry(tier);
    await step(`queue ${queue}`, () =>
      channel.assertQueue(queue, {
        durable: true,
        arguments: {
          'x-queue-type': 'quorum',
          'x-message-ttl': delay,
          'x-dead-letter-exchange': '',
          'x-dead-letter-routing-key': names.dispatch,
          'x-dead-letter-strategy': 'at-least-once',
          'x-overflow': 'reject-publish',
        },
      }),
    );
  }
  await step(`stream ${names.failed}`, () =>
    channel.assertQueue(names.failed, {
      durable: true,
      arguments: { 'x-queue-type': 'stream', 'x-max-age': options.failedRetention },
    }),
  );
  await step(`queue ${names.invalid}`, () =>
    channel.assertQueue(names.invalid, { durable: true, arguments: { 'x-queue-type': 'quorum' } }),
  );
}
