import { sampleEvent } from '../../libs/contracts/index.js';
import { startTracing, type Tracing } from '../../libs/tracing/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { OtlpReceiver } from '../support/otlp-receiver.js';
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

  beforeAll(async () => {
    otlp = await OtlpReceiver.start('hang');
    tracing = await startTracing({ url: otlp.url, protocol: 'http/protobuf', serviceName: 'collector-down', sampler: { name: 'always_on', ratio: 1 }, resourceAttributes: {}, exportTimeoutMs: 1_000 });
    receiver = await Receiver.start(() => 200);
    harness = await startHarness({ name: 'tracingdown', merchants: [testMerchant('m_down', receiver.url)], settings: { concurrency: 32 } });
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
    // The exporter did try, and hangs: the spans reached it (a request waits up to half a second for more spans).
    await waitFor('an export request', () => otlp.requests.length > 0, 5_000);
    expect(receiver.requests.every((r) => typeof r.headers.traceparent === 'string')).toBe(true);
    // About 1 s on this machine; a delivery that waited on its export would take the exporter's 10 s timeout.
    expect(elapsed).toBeLessThan(8_000);
  });
});
