/**
 * @runs-alone times 1,500 deliveries beside a collector that never answers: the parallel files take the cores it times
 */
import { sampleEvent } from '../../libs/contracts/index.js';
import { inSpan, startTracing, type Tracing } from '../../libs/tracing/index.js';
import { capturingLogger } from '../support/capturing-logger.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { OtlpReceiver, testTracingSettings } from '../support/otlp-receiver.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A collector that takes connections and never answers: spans wait in the SDK's batch (and are
 * dropped when it is full), never in front of a delivery. Every delivery is sampled.
 */
describe('a collector that does not answer', () => {
  let otlp: OtlpReceiver;
  let tracing: Tracing;
  let receiver: Receiver;
  let harness: Harness;
  const lines: Array<Record<string, unknown>> = [];

  beforeAll(async () => {
    const logger = capturingLogger(lines);
    otlp = await OtlpReceiver.start('hang');
    // A queue smaller than the spans of the deliveries below: some must be dropped, and said so.
    const settings = testTracingSettings(otlp.url, 'http/protobuf');
    tracing = await startTracing({ ...settings, sampler: { name: 'always_on', ratio: 1 }, batch: { ...settings.batch, maxQueueSize: 200, maxExportBatchSize: 100 }, exportTimeoutMs: 1_000 }, logger);
    receiver = await Receiver.start(() => 200);
    // Every request may be in flight to the one endpoint: none is deferred (a deferral waits as a
    // row and its due time), so what is timed is the delivery beside a hanging exporter.
    harness = await startHarness({ name: 'tracingdown', merchants: [testMerchant('m_down', receiver.url)], settings: { concurrency: 32, perEndpointConcurrency: 32 } });
  });

  afterAll(async () => {
    await harness?.close();
    await receiver?.close();
    // Bounded: the exports in flight end only at their timeout.
    await tracing?.shutdown(2_000);
    await otlp?.close();
  });

  it('does not slow deliveries', async () => {
    const count = 1_500;
    const started = Date.now();
    for (let i = 0; i < count; i += 50) {
      await Promise.all(Array.from({ length: Math.min(50, count - i) }, () => harness.publisher.publish(sampleEvent('payout', 'm_down'))));
    }
    await waitFor(`${count} deliveries`, () => receiver.requests.length >= count, 20_000);
    const elapsed = Date.now() - started;
    // The exporter did try, and hangs.
    await waitFor('an export request', () => otlp.requests.length > 0, 5_000);
    expect(receiver.requests.every((r) => typeof r.headers.traceparent === 'string')).toBe(true);
    // About 1 s on this machine; a delivery that waited on its export would take the exporter's 10 s timeout.
    expect(elapsed).toBeLessThan(8_000);
    // 4,500 spans for a queue of 200 (a batch of 100 a second leaves it, at the export's timeout) and a collector that never answers: the processor dropped
    // spans, and a warning says how many. The SDK counts them once it can queue a span again (an
    // export timed out): a delivery now and then until it does.
    const warning = await waitFor('the dropped spans reported', async () => {
      await harness.publisher.publish(sampleEvent('payout', 'm_down'));
      return lines.find((l) => l.message === 'tracing: spans dropped');
    }, 10_000, 100);
    expect(warning.dropped).toEqual(expect.any(Number));
    expect(warning.dropped as number).toBeGreaterThan(0);
  });
});

/** An endpoint that is no collector (a web server answering 200 with a page): spans vanish, and the log says why. */
describe('an endpoint that answers a web page', () => {
  let otlp: OtlpReceiver;
  let tracing: Tracing;
  const lines: Array<Record<string, unknown>> = [];

  beforeAll(async () => {
    otlp = await OtlpReceiver.start('page');
    tracing = await startTracing(testTracingSettings(otlp.url, 'http/protobuf'), capturingLogger(lines));
  });

  afterAll(async () => {
    await tracing?.shutdown(2_000);
    await otlp?.close();
  });

  it("logs the SDK's warning itself, not the name of the SDK's part that warned", async () => {
    await inSpan('work', {}, async () => {});
    await tracing.flush();
    const warning = await waitFor('the warning', () => lines.find((l) => l.message === 'tracing: exporter warning'), 5_000);
    expect(String(warning.detail)).toContain('could not deserialize response');
  });
});
