import type { Channel } from 'amqplib';
import { BrokerConnection, type BrokerConnectionOptions } from '../broker/index.js';
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
import { NamedError } from '../runtime/named-error.js';

/** What an operator does about each kind: a queue holds webhooks not yet delivered, so it is drained before it goes. */
const MISMATCH_FIX = {
  stream: 'If FAILED_RETENTION changed (or the failed stream was made before its segment size was set), delete the old stream (its entries go), or use another TOPOLOGY_PREFIX.',
  queue: 'Give every program of this TOPOLOGY_PREFIX the same settings; if an older version made it, drain it (stop publishing, let the old dispatchers empty it), then delete it (the programs declare it again), or use another TOPOLOGY_PREFIX.',
  exchange: 'Delete it (the programs declare it again; bindings of your own go with it), or use another TOPOLOGY_PREFIX.',
} as const;

/** A queue or exchange exists with other arguments (reply 406): declaring cannot fix it, an operator must. */
export class TopologyMismatchError extends NamedError {
  constructor(readonly entity: `${keyof typeof MISMATCH_FIX} ${string}`, cause: unknown) {
    super(`${entity} already exists with different arguments (${String((cause as Error)?.message ?? cause)}). ${MISMATCH_FIX[entity.split(' ')[0] as keyof typeof MISMATCH_FIX]}`);
  }
}

/** An open channel, or a way to open one: a 406 closes its channel, and a creation-only difference needs another. */
type ChannelSource = Channel | (() => Promise<Channel>);

type Step = ((declare: (channel: Channel) => Promise<unknown>) => Promise<void>) & { canReopen: boolean };

/**
 * Runs each declaration on the channel, opening another after a 406 closed it. The channels it
 * opened are closed once `declarations` end: a declare on every reconnect left one open each time.
 */
async function stepping(source: ChannelSource, declarations: (step: Step) => Promise<void>): Promise<void> {
  let channel: Channel | undefined;
  const opened: Channel[] = [];
  const step = async (declare: (channel: Channel) => Promise<unknown>) => {
    if (!channel) {
      channel = typeof source === 'function' ? await source() : source;
      if (typeof source === 'function') opened.push(channel);
    }
    await declare(channel).catch((err: unknown) => {
      if (isMismatch(err)) channel = undefined;
      throw err;
    });
  };
  try {
    await declarations(Object.assign(step, { canReopen: typeof source === 'function' }));
  } finally {
    // Closed already by a 406, or by the connection that opened it: nothing to do.
    await Promise.all(opened.map((opening) => opening.close().catch(() => {})));
  }
}

function isMismatch(err: unknown): boolean {
  return (err as { code?: number })?.code === 406;
}

/** RabbitMQ's 406 names the first argument that differs: "inequivalent arg 'x-…'". */
function namesCreationOnly(err: unknown): boolean {
  const text = String((err as Error)?.message ?? '');
  return CREATION_ONLY_ARGUMENTS.some((name) => text.includes(`'${name}'`));
}

async function declareExchange(step: Step, exchange: ExchangeSpec): Promise<void> {
  await step((channel) => channel.assertExchange(exchange.name, exchange.type, { durable: true })).catch((err: unknown) => {
    throw isMismatch(err) ? new TopologyMismatchError(`exchange ${exchange.name}`, err) : err;
  });
}

/** A queue whose replication alone differs is kept: declared again without those arguments to check the rest. */
async function declareQueue(step: Step, queue: QueueSpec): Promise<void> {
  const entity = `${queue.kind} ${queue.name}` as const;
  const assert = (args: Record<string, unknown>) => step((channel) => channel.assertQueue(queue.name, { durable: true, arguments: args }));
  try {
    await assert({ ...queue.arguments });
    return;
  } catch (err) {
    if (!isMismatch(err)) throw err;
    if (!namesCreationOnly(err) || !step.canReopen) throw new TopologyMismatchError(entity, err);
  }
  const rest: Record<string, unknown> = { ...queue.arguments };
  for (const name of CREATION_ONLY_ARGUMENTS) delete rest[name];
  await assert(rest).catch((err: unknown) => {
    if (!isMismatch(err)) throw err;
    if (!namesCreationOnly(err)) throw new TopologyMismatchError(entity, err);
  });
}

/** What a publisher needs so that no event is lost before a dispatcher ever ran; only this, so it never clashes. */
export async function declareIntake(source: ChannelSource, prefix: string, replication?: Replication): Promise<void> {
  await stepping(source, (step) => declareIntakeWith(step, prefix, replication));
}

async function declareIntakeWith(step: Step, prefix: string, replication?: Replication): Promise<void> {
  const intake = intakeSpec(prefix, replication);
  await declareExchange(step, intake.exchange);
  await declareQueue(step, intake.queue);
  await step((channel) => channel.bindQueue(intake.binding.destination, intake.binding.source, intake.binding.routingKey));
}

/** Declares everything, the intake first, so events reach dispatch even when a later queue clashes. */
export async function declareTopology(source: ChannelSource, options: TopologyOptions): Promise<void> {
  const spec = topologySpec(options);
  await stepping(source, async (step) => {
    await declareIntakeWith(step, options.prefix, options.replication);
    for (const queue of spec.queues) {
      if (queue.name !== spec.binding.destination) await declareQueue(step, queue);
    }
    await declareExchange(step, spec.operational);
    if (options.operationalWebhook === undefined) return;
    // Unbinding a binding that is not there is no error.
    const { source: exchange, destination, routingKey } = operationalBinding(options.prefix);
    await step((channel) => (options.operationalWebhook ? channel.bindQueue(destination, exchange, routingKey) : channel.unbindQueue(destination, exchange, routingKey)));
  });
}

export async function declareQueueSpec(source: ChannelSource, queue: QueueSpec): Promise<void> {
  await stepping(source, (step) => declareQueue(step, queue));
}

/** A program's broker connection: the whole topology declared on every (re)connect, then opened. */
export async function openTopologyBroker(
  options: Omit<BrokerConnectionOptions, 'declare'> & { topology: TopologyOptions; signal?: AbortSignal },
): Promise<BrokerConnection> {
  const { topology, signal, ...connection } = options;
  const broker = new BrokerConnection({ ...connection, declare: (openChannel) => declareTopology(openChannel, topology) });
  await broker.open(undefined, signal);
  return broker;
}
