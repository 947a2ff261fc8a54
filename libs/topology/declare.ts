import type { Channel } from 'amqplib';
import { type ExchangeSpec, intakeSpec, type QueueSpec, type TopologyOptions, topologySpec } from './spec.js';

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

function declareExchange(channel: Channel, exchange: ExchangeSpec): Promise<void> {
  return step(`exchange ${exchange.name}`, () => channel.assertExchange(exchange.name, exchange.type, { durable: true }));
}

function declareQueue(channel: Channel, queue: QueueSpec): Promise<void> {
  return step(`${queue.kind} ${queue.name}`, () =>
    channel.assertQueue(queue.name, { durable: true, arguments: { ...queue.arguments } }),
  );
}

/**
 * What a publisher needs so that no event is lost even before a dispatcher ever ran: the events
 * exchange and the dispatch queue bound to it. Publishers declare only this, so they never clash
 * with the programs' retry schedule.
 */
export async function declareIntake(channel: Channel, prefix: string): Promise<void> {
  const intake = intakeSpec(prefix);
  await declareExchange(channel, intake.exchange);
  await declareQueue(channel, intake.queue);
  await channel.bindQueue(intake.binding.destination, intake.binding.source, intake.binding.routingKey);
}

/**
 * Declares everything idempotently; runs at start-up and again on every reconnect.
 * A 406 closes the channel, so the first mismatch ends the declaration with a named error.
 * The intake comes first, so events are routed to dispatch even when a later queue clashes.
 */
export async function declareTopology(channel: Channel, options: TopologyOptions): Promise<void> {
  const spec = topologySpec(options);
  await declareIntake(channel, options.prefix);
  for (const queue of spec.queues) {
    if (queue.name !== spec.binding.destination) await declareQueue(channel, queue);
  }
}
