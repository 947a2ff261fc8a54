import type { Channel } from 'amqplib';
import { declareIntake, declareQueueSpec, declareTopology, deliveriesSpec, TopologyMismatchError, topologySpec } from '../../libs/topology/index.js';

/** Records what a declaration asks of the channel; `fail` answers one entity with an AMQP reply code. */
function recordingChannel(fail?: { name: string; code: number }) {
  const calls: unknown[][] = [];
  const answer = (name: string) =>
    fail?.name === name
      ? Promise.reject(Object.assign(new Error(`reply ${fail.code} for ${name}`), { code: fail.code }))
      : Promise.resolve({});
  const channel = {
    assertExchange: (name: string, type: string, options: unknown) => {
      calls.push(['exchange', name, type, options]);
      return answer(name);
    },
    assertQueue: (name: string, options: unknown) => {
      calls.push(['queue', name, options]);
      return answer(name);
    },
    bindQueue: (queue: string, source: string, pattern: string) => {
      calls.push(['bind', queue, source, pattern]);
      return Promise.resolve({});
    },
    unbindQueue: (queue: string, source: string, pattern: string) => {
      calls.push(['unbind', queue, source, pattern]);
      return Promise.resolve({});
    },
  };
  return { channel: channel as unknown as Channel, calls };
}

describe('topologySpec', () => {
  it('describes the exchange, each queue with its exact arguments, and the binding for a prefix: no retry queues (waits are rows)', () => {
    expect(topologySpec({ prefix: 'acme', failedRetention: '7D' })).toEqual({
      exchange: { name: 'acme.events', type: 'topic' },
      operational: { name: 'acme.operational', type: 'topic' },
      queues: [
        {
          name: 'acme.dispatch',
          kind: 'queue',
          arguments: {
            'x-queue-type': 'quorum',
            'x-quorum-initial-group-size': 3,
            'x-delivery-limit': 10,
            'x-dead-letter-exchange': '',
            'x-dead-letter-routing-key': 'acme.invalid',
            'x-dead-letter-strategy': 'at-least-once',
            'x-overflow': 'reject-publish',
          },
        },
        { name: 'acme.failed', kind: 'stream', arguments: { 'x-queue-type': 'stream', 'x-max-age': '7D', 'x-stream-max-segment-size-bytes': 1024 * 1024, 'x-initial-cluster-size': 3 } },
        { name: 'acme.invalid', kind: 'queue', arguments: { 'x-queue-type': 'quorum', 'x-quorum-initial-group-size': 3 } },
      ],
      binding: { source: 'acme.events', destination: 'acme.dispatch', routingKey: '#' },
    });
  });

  it('replicates each quorum queue and the stream as configured', () => {
    const spec = topologySpec({ prefix: 'acme', failedRetention: '7D', replication: { quorumGroupSize: 5, streamClusterSize: 2 } });
    expect(spec.queues.map((q) => [q.name, q.arguments['x-quorum-initial-group-size'] ?? q.arguments['x-initial-cluster-size']])).toEqual([
      ['acme.dispatch', 5],
      ['acme.failed', 2],
      ['acme.invalid', 5],
    ]);
  });
});

describe('declaring the topology from its spec', () => {
  const options = { prefix: 'acme', failedRetention: '7D' };

  it('declares the intake first, then every other queue of the spec with its arguments, all durable', async () => {
    const { channel, calls } = recordingChannel();
    await declareTopology(channel, options);
    const spec = topologySpec(options);
    expect(calls).toEqual([
      ['exchange', 'acme.events', 'topic', { durable: true }],
      ['queue', 'acme.dispatch', { durable: true, arguments: spec.queues[0]!.arguments }],
      ['bind', 'acme.dispatch', 'acme.events', '#'],
      ...spec.queues.slice(1).map((q) => ['queue', q.name, { durable: true, arguments: q.arguments }]),
      ['exchange', 'acme.operational', 'topic', { durable: true }],
    ]);
  });

  it('binds the operational exchange to dispatch for a dispatcher with OPERATIONAL_WEBHOOK_URL, unbinds it for one without, and leaves it to other programs', async () => {
    const declared = async (operationalWebhook?: boolean) => {
      const { channel, calls } = recordingChannel();
      await declareTopology(channel, { ...options, operationalWebhook });
      return calls;
    };
    const plain = await declared(undefined);
    expect(plain.filter((c) => c[2] === 'acme.operational')).toEqual([]);
    expect(await declared(true)).toEqual([...plain, ['bind', 'acme.dispatch', 'acme.operational', '#']]);
    expect(await declared(false)).toEqual([...plain, ['unbind', 'acme.dispatch', 'acme.operational', '#']]);
    // No queue of its own: the operational webhook's retries are waits like any webhook's.
    expect((await declared(true)).filter((c) => c[0] === 'queue' && String(c[1]).startsWith('acme.operational'))).toEqual([]);
  });

  it('gives publishers only the exchange, the dispatch queue and the binding', async () => {
    const { channel, calls } = recordingChannel();
    await declareIntake(channel, 'acme');
    expect(calls.map((c) => c.slice(0, 2))).toEqual([
      ['exchange', 'acme.events'],
      ['queue', 'acme.dispatch'],
      ['bind', 'acme.dispatch'],
    ]);
  });

  it.each([
    ['acme.events', 'exchange acme.events'],
    ['acme.invalid', 'queue acme.invalid'],
    ['acme.failed', 'stream acme.failed'],
  ])('turns a 406 for %s into a TopologyMismatchError naming "%s"', async (name, entity) => {
    const { channel } = recordingChannel({ name, code: 406 });
    const error = await declareTopology(channel, options).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(TopologyMismatchError);
    expect((error as TopologyMismatchError).entity).toBe(entity);
    expect((error as Error).message).toContain(`${entity} already exists with different arguments (reply 406 for ${name})`);
  });

  it('passes other broker errors through unchanged', async () => {
    const { channel } = recordingChannel({ name: 'acme.invalid', code: 403 });
    const error = await declareTopology(channel, options).catch((err: unknown) => err);
    expect(error).not.toBeInstanceOf(TopologyMismatchError);
    expect((error as { code: number }).code).toBe(403);
  });
});

describe('declaring on channels it opens itself', () => {
  it('closes each channel it opened, also after a refusal: a declare on every reconnect left one open each time', async () => {
    let open = 0;
    const source = (fail?: boolean) => async () => {
      open++;
      return {
        assertQueue: async () => {
          if (fail) throw Object.assign(new Error('NOT_FOUND'), { code: 404 });
          return {};
        },
        assertExchange: async () => ({}),
        bindQueue: async () => ({}),
        close: async () => void open--,
      } as unknown as Channel;
    };
    await declareQueueSpec(source(), deliveriesSpec('p'));
    await declareIntake(source(), 'p');
    await declareTopology(source(), { prefix: 'p', failedRetention: '1D' });
    await expect(declareQueueSpec(source(true), deliveriesSpec('p'))).rejects.toThrow('NOT_FOUND');
    expect(open).toBe(0);
  });
});
