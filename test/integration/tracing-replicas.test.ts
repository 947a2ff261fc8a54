import { randomBytes } from 'node:crypto';
import { sampleEvent } from '../../libs/contracts/index.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants } from '../support/merchant-rows.js';
import { useTestDatabase } from '../support/postgres.js';
import { KIND, OtlpReceiver } from '../support/otlp-receiver.js';
import { dispatcherEnv, startProgram } from '../support/process.js';
import { type ReceivedRequest, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Two built dispatchers tracing at once, each with its own batch span processor, to one collector, and
 * one of them killed (SIGKILL) while its attempts wait on the merchant: the webhooks it held are
 * delivered by the other, in the trace their publisher started, and the one left goes on
 * exporting. What the killed one had not exported yet is lost, as with the SDK's batch processor.
 */
const DISPATCHER = 'dist/apps/dispatcher/main.js';
const traceparentOf = (request: ReceivedRequest) => /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(String(request.headers.traceparent));

describe('two dispatcher replicas tracing at once, one killed mid-delivery', () => {
  const prefix = uniquePrefix('tracingreplicas');
  const names = topologyNames(prefix);
  let receiver: Receiver;
  let otlp: OtlpReceiver;
  let broker: BrokerConnection;
  /** While set, the merchant answers only after this long: attempts are in flight when a replica is killed. */
  let answerAfterMs = 0;
  const replicas: Array<ReturnType<typeof startProgram>> = [];
  const own = useTestDatabase('tracing_replicas');

  beforeAll(async () => {
    receiver = await Receiver.start(() => ({ status: 204, delayMs: answerAfterMs }));
    otlp = await OtlpReceiver.start();
    broker = new BrokerConnection({ url: brokerUrl(), name: 'test-tracing-replicas', logger: silentLogger() });
    await broker.open(10_000);
    await seedMerchants(own.db.url, [testMerchant('m_replicas', receiver.url)]);
    for (const instance of ['a', 'b']) {
      const replica = startProgram(
        DISPATCHER,
        dispatcherEnv(prefix, own.db.url, {
          OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_SERVICE_NAME: 'webhook-dispatcher',
          OTEL_RESOURCE_ATTRIBUTES: `service.instance.id=${instance}`,
        }),
      );
      replicas.push(replica);
      // One at a time: the first declares the topology the second then finds.
      await waitFor(`replica ${instance} consuming`, () => replica.output.stdout.includes('dispatcher consuming') || replica.child.exitCode !== null, 20_000);
      expect(replica.child.exitCode).toBeNull();
    }
  });

  afterAll(async () => {
    for (const replica of replicas) if (replica.child.exitCode === null) replica.child.kill('SIGKILL');
    await Promise.all(replicas.map((replica) => replica.finished));
    await broker?.close();
    await receiver?.close();
    await otlp?.close();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
  });

  /** Publishes events as an upstream client that traces would: each in a trace of its own. */
  async function publishTraced(count: number, label: string): Promise<Map<string, string>> {
    const traces = new Map<string, string>();
    for (let i = 0; i < count; i++) {
      const id = `evt_${label}_${i}_${Date.now()}`;
      const traceId = randomBytes(16).toString('hex');
      traces.set(id, traceId);
      await broker.publish(names.events, 'payout', Buffer.from(JSON.stringify(sampleEvent('payout', 'm_replicas'))), {
        persistent: true,
        contentType: 'application/json',
        messageId: id,
        headers: { traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` },
      });
    }
    return traces;
  }

  const requestsFor = (id: string) => receiver.requests.filter((r) => r.headers['webhook-id'] === id);

  it('keeps each webhook in its trace across the replicas and the kill, and the replica left exports every attempt it makes', async () => {
    // Both replicas deliver and export to the one collector at once.
    const warm = await publishTraced(20, 'warm');
    const warmTraces = new Set(warm.values());
    await waitFor('both replicas exported attempts', () => {
      const exported = new Set(otlp.spans.filter((s) => s.kind === KIND.client && warmTraces.has(s.traceId)).map((s) => s.instance));
      return exported.has('a') && exported.has('b');
    }, 15_000, 50);

    // Attempts held by the merchant on both replicas; then one replica dies with its own in flight.
    answerAfterMs = 3_000;
    const held = await publishTraced(20, 'held');
    await waitFor('every held event attempted', () => [...held.keys()].every((id) => requestsFor(id).length === 1), 15_000, 20);
    const [killed, left] = replicas as [ReturnType<typeof startProgram>, ReturnType<typeof startProgram>];
    const killedAt = Date.now();
    killed.child.kill('SIGKILL');
    await killed.finished;
    answerAfterMs = 0;

    // Every event ends in a 204 to the replica left, its attempt exported: its own attempts, and
    // the killed one's messages, redelivered to it.
    const delivered = await waitFor('every held event delivered and exported by the replica left', () => {
      const found = [...held].map(([, traceId]) => otlp.spans.find((s) => s.traceId === traceId && s.kind === KIND.client && s.attributes['http.response.status_code'] === 204));
      return found.every((span) => span !== undefined) && found;
    }, 20_000, 50);
    expect(new Set(delivered.map((span) => span!.instance))).toEqual(new Set(['b']));
    const redelivered = [...held.keys()].filter((id) => requestsFor(id).length === 2);
    // The kill fell in the middle: the killed replica held some of the events, the other the rest.
    expect(redelivered.length).toBeGreaterThan(0);
    expect(redelivered.length).toBeLessThan(held.size);
    expect(redelivered.every((id) => requestsFor(id)[1]!.at >= killedAt)).toBe(true);
    // Each request, the killed replica's and the redelivery alike, carries the event's own trace;
    // the span exported for each delivery is the one whose traceparent the merchant saw last.
    [...held].forEach(([id, traceId], i) => {
      const requests = requestsFor(id);
      for (const request of requests) expect(traceparentOf(request)?.[1]).toBe(traceId);
      expect(traceparentOf(requests.at(-1)!)?.[2]).toBe(delivered[i]!.spanId);
    });
    expect(left.child.exitCode).toBeNull();
  });
});
