import { topologyNames } from './names.js';

export interface TopologyOptions {
  prefix: string;
  /** x-max-age, e.g. `30D`. */
  failedRetention: string;
  /** The broker caps each at its number of nodes, so 3 runs on a single node too. */
  replication?: Replication;
  deliveriesStream?: boolean;
  /** The dispatcher's: bind the operational exchange to dispatch, or unbind it; absent: left as it is. */
  operationalWebhook?: boolean;
}

export type Replication = { quorumGroupSize: number; streamClusterSize: number };

const DEFAULT_REPLICATION: Replication = { quorumGroupSize: 3, streamClusterSize: 3 };

/** Arguments that only shape a queue when it is created (an operator grows it with `rabbitmq-queues grow`): not a mismatch. */
export const CREATION_ONLY_ARGUMENTS = ['x-quorum-initial-group-size', 'x-initial-cluster-size'] as const;

/** Every entity is durable and never auto-deleted; only names, kinds and arguments vary. */
export type ExchangeSpec = { name: string; type: 'topic' };

export interface QueueSpec {
  name: string;
  /** Names the entity in errors; the type is x-queue-type. */
  kind: 'queue' | 'stream';
  arguments: Readonly<Record<string, string | number>>;
}

type BindingSpec = { source: string; destination: string; routingKey: string };

export type TopologySpec = ReturnType<typeof topologySpec>;

function quorum(replication: Replication = DEFAULT_REPLICATION) {
  return { 'x-queue-type': 'quorum', 'x-quorum-initial-group-size': replication.quorumGroupSize } as const;
}

/** A stream kept `maxAge`; small segments let retention drop them (it never drops the one being written). */
function stream(name: string, maxAge: string, replication: Replication = DEFAULT_REPLICATION, segmentBytes?: number, maxBytes?: number): QueueSpec {
  return {
    name,
    kind: 'stream',
    arguments: {
      'x-queue-type': 'stream',
      'x-max-age': maxAge,
      ...(maxBytes === undefined ? {} : { 'x-max-length-bytes': maxBytes }),
      ...(segmentBytes === undefined ? {} : { 'x-stream-max-segment-size-bytes': segmentBytes }),
      'x-initial-cluster-size': replication.streamClusterSize,
    },
  };
}

/** Set because 3.10 has no delivery limit by default and 4.x silently drops a message after 20 returns. */
export const DISPATCH_DELIVERY_LIMIT = 10;

/** The deliveries stream must outlast a PostgreSQL outage; its size cap keeps a long one from filling the broker's disk. */
export const DELIVERIES_RETENTION = '7D';
export const DELIVERIES_MAX_BYTES = 5_000_000_000;
/** RabbitMQ drops only whole closed segments: a record outlives its 7 days until 50 MB more follow it. */
export const DELIVERIES_SEGMENT_BYTES = 50_000_000;

/** RabbitMQ applies x-max-age only when it opens a segment: small ones (and libs/streams/rollover.ts) keep retention. */
export const FAILED_SEGMENT_BYTES = 1024 * 1024;

export function failedSpec(prefix: string, retention: string, replication?: Replication, segmentBytes = FAILED_SEGMENT_BYTES): QueueSpec {
  return stream(topologyNames(prefix).failed, retention, replication, segmentBytes);
}

export function deliveriesSpec(prefix: string, replication?: Replication): QueueSpec {
  return stream(topologyNames(prefix).deliveries, DELIVERIES_RETENTION, replication, DELIVERIES_SEGMENT_BYTES, DELIVERIES_MAX_BYTES);
}

export function intakeSpec(prefix: string, replication?: Replication): { exchange: ExchangeSpec; queue: QueueSpec; binding: BindingSpec } {
  const names = topologyNames(prefix);
  return {
    exchange: { name: names.events, type: 'topic' },
    queue: {
      name: names.dispatch,
      kind: 'queue',
      arguments: {
        ...quorum(replication),
        'x-delivery-limit': DISPATCH_DELIVERY_LIMIT,
        'x-dead-letter-exchange': '',
        'x-dead-letter-routing-key': names.invalid,
        // at-least-once requires reject-publish (no length limit is set, so nothing is rejected).
        'x-dead-letter-strategy': 'at-least-once',
        'x-overflow': 'reject-publish',
      },
    },
    binding: { source: names.events, destination: names.dispatch, routingKey: '#' },
  };
}

/** The whole topology as data: the programs, docker/rabbitmq/definitions.json and the tests share it. */
export function topologySpec(options: TopologyOptions) {
  const names = topologyNames(options.prefix);
  const intake = intakeSpec(options.prefix, options.replication);
  return {
    exchange: intake.exchange,
    operational: { name: names.operational, type: 'topic' } satisfies ExchangeSpec,
    /** In declaration order: dispatch, failed, invalid, deliveries. */
    queues: [
      intake.queue,
      failedSpec(options.prefix, options.failedRetention, options.replication),
      { name: names.invalid, kind: 'queue', arguments: { ...quorum(options.replication) } },
      ...(options.deliveriesStream ? [deliveriesSpec(options.prefix, options.replication)] : []),
    ] satisfies QueueSpec[],
    binding: intake.binding,
  };
}

/** Every operational event is also a delivery for the platform's endpoint (OPERATIONAL_WEBHOOK_URL). */
export function operationalBinding(prefix: string): BindingSpec {
  const names = topologyNames(prefix);
  return { source: names.operational, destination: names.dispatch, routingKey: '#' };
}
