import type { Channel } from 'amqplib';
import {
  CREATION_ONLY_ARGUMENTS,
  type ExchangeSpec,
  intakeSpec,
  operationalBinding,
  type QueueSpec,
  type Replication,
  type TopologyOptions,
  topologySpec,
} from './spec.js';

/** A queue or exchange exists with other arguments (reply 406): declaring cannot fix it, an operator must. */
export class TopologyMismatchError extends Error {
  constructor(readonly entity: string, cause: unknown) {
    super(
      `${entity} already exists with different arguments (${String((cause as Error)?.message ?? cause)}). ` +
        'If FAILED_RETENTION changed (or the failed stream was made before its segment size was set), delete the old stream (its entries go), or use another TOPOLOGY_PREFIX.',
    );
    this.name = 'TopologyMismatchError';
  }
}

/**
 * An open channel, or a way to open one. A 406 closes the channel it happened on; with a function
 * the declaration opens another and carries on, which a creation-only difference needs.
 */
export type ChannelSource = Channel | (() => Promise<Channel>);

class Declarer {
  private channel?: Channel;

  constructor(private readonly source: ChannelSource) {}

  private async open(): Promise<Channel> {
    if (!this.channel) this.channel = typeof this.source === 'function' ? await this.source() : this.source;
    return this.channel;
  }

  /** Runs one declaration; a 406 leaves the channel closed, so the next step opens another. */
  async step(declare: (channel: Channel) => Promise<unknown>): Promise<void> {
    const channel = await this.open();
    try {
      await declare(channel);
    } catch (err) {
      if (isMismatch(err)) this.channel = undefined;
      throw err;
    }
  }

  get canReopen(): boolean {
    return typeof this.source === 'function';
  }
}

function isMismatch(err: unknown): boolean {
  return (err as { code?: number })?.code === 406;
}

/** RabbitMQ's 406 names the first argument that differs: "inequivalent arg 'x-…'". */
function namesOneOf(err: unknown, names: readonly string[]): boolean {
  const text = String((err as Error)?.message ?? '');
  return names.some((name) => text.includes(`'${name}'`));
}

async function declareExchange(declarer: Declarer, exchange: ExchangeSpec): Promise<void> {
  try {
    await declarer.step((channel) => channel.assertExchange(exchange.name, exchange.type, { durable: true }));
  } catch (err) {
    throw isMismatch(err) ? new TopologyMismatchError(`exchange ${exchange.name}`, err) : err;
  }
}

/**
 * Declares a queue with its arguments. When only its replication differs (created by an older
 * version, or with another QUORUM_GROUP_SIZE / STREAM_CLUSTER_SIZE), it is kept as it is: the rest
 * of its arguments are checked by declaring it again without those, and if it was created with
 * explicit other values, that check is not possible and it is accepted.
 */
async function declareQueue(declarer: Declarer, queue: QueueSpec): Promise<void> {
  const entity = `${queue.kind} ${queue.name}`;
  const assert = (args: Record<string, unknown>) => (channel: Channel) => channel.assertQueue(queue.name, { durable: true, arguments: args });
  try {
    await declarer.step(assert({ ...queue.arguments }));
    return;
  } catch (err) {
    if (!isMismatch(err)) throw err;
    if (!namesOneOf(err, CREATION_ONLY_ARGUMENTS) || !declarer.canReopen) throw new TopologyMismatchError(entity, err);
  }
  const rest: Record<string, unknown> = { ...queue.arguments };
  // What an existing queue may differ in: its replication.
  for (const name of CREATION_ONLY_ARGUMENTS) delete rest[name];
  try {
    await declarer.step(assert(rest));
  } catch (err) {
    if (!isMismatch(err)) throw err;
    if (!namesOneOf(err, CREATION_ONLY_ARGUMENTS)) throw new TopologyMismatchError(entity, err);
  }
}

/**
 * What a publisher needs so that no event is lost even before a dispatcher ever ran: the events
 * exchange and the dispatch queue bound to it. Publishers declare only this, so they never clash
 * with the arguments the programs give their other queues and streams.
 */
export async function declareIntake(source: ChannelSource, prefix: string, replication?: Replication): Promise<void> {
  await declareIntakeWith(new Declarer(source), prefix, replication);
}

async function declareIntakeWith(declarer: Declarer, prefix: string, replication?: Replication): Promise<void> {
  const intake = intakeSpec(prefix, replication);
  await declareExchange(declarer, intake.exchange);
  await declareQueue(declarer, intake.queue);
  await declarer.step((channel) => channel.bindQueue(intake.binding.destination, intake.binding.source, intake.binding.routingKey));
}

/**
 * Declares everything idempotently; runs at start-up and again on every reconnect.
 * The first real mismatch ends the declaration with a named error. The intake comes first, so
 * events are routed to dispatch even when a later queue clashes.
 */
export async function declareTopology(source: ChannelSource, options: TopologyOptions): Promise<void> {
  const declarer = new Declarer(source);
  const spec = topologySpec(options);
  await declareIntakeWith(declarer, options.prefix, options.replication);
  for (const queue of spec.queues) {
    if (queue.name !== spec.binding.destination) await declareQueue(declarer, queue);
  }
  await declareExchange(declarer, spec.operational);
  if (options.operationalWebhook !== undefined) {
    // Unbinding a binding that is not there is no error: a dispatcher without the URL stops the events reaching dispatch.
    const { source, destination, routingKey } = operationalBinding(options.prefix);
    await declarer.step((channel) => (options.operationalWebhook ? channel.bindQueue(destination, source, routingKey) : channel.unbindQueue(destination, source, routingKey)));
  }
}

/** One queue or stream on its own, e.g. the deliveries stream declared by the programs that use it. */
export async function declareQueueSpec(source: ChannelSource, queue: QueueSpec): Promise<void> {
  await declareQueue(new Declarer(source), queue);
}
