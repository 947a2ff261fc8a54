import type { ConsumeMessage } from 'amqplib';
import { Webhook } from 'standardwebhooks';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver, refusedUrl } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const SCHEDULE = [100, 150, 200];

describe('retries on the schedule, then the failed stream', () => {
  let failing: Receiver;
  let hanging: Receiver;
  let harness: Harness;
  let refusedMerchantUrl: string;
  const merchants = {
    failing: testMerchant('m_500', 'http://placeholder'),
    hanging: testMerchant('m_hang', 'http://placeholder'),
    refused: testMerchant('m_refused', 'http://placeholder'),
  };
  let failedEntries = 0;

  beforeAll(async () => {
    failing = await Receiver.start(() => 500);
    hanging = await Receiver.start(() => 'hang');
    refusedMerchantUrl = await refusedUrl();
    merchants.failing.endpoints[0]!.url = failing.url;
    merchants.hanging.endpoints[0]!.url = hanging.url;
    merchants.refused.endpoints[0]!.url = refusedMerchantUrl;
    harness = await startHarness({
      name: 'retries',
      merchants: Object.values(merchants),
      retryDelaysMs: SCHEDULE,
      settings: { deliveryTimeoutMs: 300 },
    });
  });

  afterAll(async () => {
    await harness?.close();
    await Promise.all([failing?.close(), hanging?.close()]);
  });

  async function nextFailedEntry(): Promise<ConsumeMessage> {
    failedEntries++;
    const entries = await harness.test.readStream(harness.names.failed, failedEntries, 15_000);
    return entries[failedEntries - 1]!;
  }

  function expectFailureHeaders(entry: ConsumeMessage, merchantId: string, webhookId: string) {
    const headers = entry.properties.headers!;
    expect(entry.properties.messageId).toBe(webhookId);
    expect(headers[HEADERS.entryType]).toBe('failure');
    expect(headers[HEADERS.merchantId]).toBe(merchantId);
    expect(headers[HEADERS.webhookId]).toBe(webhookId);
    expect(headers[HEADERS.attempts]).toBe(SCHEDULE.length + 1);
    expect(Date.parse(headers[HEADERS.firstSeenAt] as string)).not.toBeNaN();
    expect(Date.parse(headers[HEADERS.failedAt] as string)).not.toBeNaN();
    // Streams refuse array and table headers: every header must be a scalar.
    for (const value of Object.values(headers)) expect(['string', 'number', 'boolean']).toContain(typeof value);
  }

  it('retries a merchant answering 500 exactly the scheduled number of times with a stable webhook-id, then fails it', async () => {
    const message = sampleEvent('charge.completed', merchants.failing.id);
    const { messageId } = await harness.publisher.publish(message);

    const entry = await nextFailedEntry();
    expect(failing.requests).toHaveLength(SCHEDULE.length + 1);
    for (const request of failing.requests) {
      expect(request.headers['webhook-id']).toBe(messageId);
      new Webhook(merchants.failing.endpoints[0]!.secret).verify(request.body, request.headers as Record<string, string>);
    }
    // Each wait is at least its delay.
    for (const [i, delay] of SCHEDULE.entries()) {
      expect(failing.requests[i + 1]!.at - failing.requests[i]!.at).toBeGreaterThanOrEqual(delay - 5);
    }
    expectFailureHeaders(entry, merchants.failing.id, messageId);
    expect(entry.properties.headers![HEADERS.lastStatus]).toBe(500);
    expect(entry.properties.headers![HEADERS.lastError]).toBe('HTTP 500');
    expect(entry.properties.headers![HEADERS.reference]).toBe(message.data.tnxRef);
    expect(entry.content.toString()).toBe(JSON.stringify(message));
  });

  it('treats a merchant that never answers as failed after DELIVERY_TIMEOUT_MS, on the same schedule', async () => {
    const message = sampleEvent('payout', merchants.hanging.id);
    const { messageId } = await harness.publisher.publish(message);

    const entry = await nextFailedEntry();
    expect(hanging.requests).toHaveLength(SCHEDULE.length + 1);
    expect(new Set(hanging.requests.map((r) => r.headers['webhook-id']))).toEqual(new Set([messageId]));
    expectFailureHeaders(entry, merchants.hanging.id, messageId);
    expect(entry.properties.headers![HEADERS.lastStatus]).toBeUndefined();
    expect(entry.properties.headers![HEADERS.lastError]).toBe('timeout after 300 ms');
    expect(entry.properties.headers![HEADERS.reference]).toBe(message.data.reference);
  });

  it('treats a refused connection as a failed attempt and records the network error', async () => {
    const message = sampleEvent('refund.completed', merchants.refused.id);
    const { messageId } = await harness.publisher.publish(message);

    const entry = await nextFailedEntry();
    expectFailureHeaders(entry, merchants.refused.id, messageId);
    expect(entry.properties.headers![HEADERS.lastError]).toMatch(/^ECONNREFUSED/);
    expect(entry.properties.headers![HEADERS.reference]).toBe(message.data.refundRef);
    expect(entry.properties.headers![HEADERS.tnxRef]).toBe(message.data.tnxRef);
    expect(harness.dispatcher.stats.retried).toBeGreaterThanOrEqual(SCHEDULE.length * 3);
  });
});

describe('a merchant that answers on its third attempt', () => {
  // A harness of its own, with the usual 2 s delivery timeout: in the one above (300 ms, for the
  // merchant that never answers) a process stalled 300 ms as the 200 came timed it out, and the
  // webhook was sent a fourth time (at least once: correct, but not what this case counts).
  it('delivers on a later attempt and then leaves nothing in any queue', async () => {
    const flaky = await Receiver.start((n) => (n < 2 ? 503 : 200));
    const merchant = testMerchant('m_flaky', flaky.url);
    const harness = await startHarness({ name: 'retries-flaky', merchants: [merchant], retryDelaysMs: SCHEDULE });
    try {
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await flaky.waitForRequests(3);
      await waitFor('delivered', () => harness.dispatcher.stats.delivered >= 1);
      expect(flaky.requests.map((r) => r.headers['webhook-id'])).toEqual([messageId, messageId, messageId]);
      expect(harness.dispatcher.stats.failed).toBe(0);
      expect(await harness.test.messageCount(harness.names.dispatch)).toBe(0);
      await waitFor('no wait left', async () => (await harness.waits.census(0)).waiting === 0);
    } finally {
      await harness.close();
      await flaky.close();
    }
  });
});

describe('an empty schedule', () => {
  it('makes a single attempt and fails straight to the failed stream', async () => {
    const receiver = await Receiver.start(() => 502);
    const merchant = testMerchant('m_once', receiver.url);
    const harness = await startHarness({ name: 'single', merchants: [merchant], retryDelaysMs: [] });
    try {
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
      const [entry] = await harness.test.readStream(harness.names.failed, 1);
      expect(receiver.requests).toHaveLength(1);
      expect(entry!.properties.messageId).toBe(messageId);
      expect(entry!.properties.headers![HEADERS.attempts]).toBe(1);
      expect(entry!.properties.headers![HEADERS.lastStatus]).toBe(502);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });

  it('postpones nothing for an open circuit on a dispatcher whose clock is behind the one that first saw the webhook', async () => {
    const receiver = await Receiver.start(() => 502);
    const merchant = testMerchant('m_once_skew', receiver.url);
    // One failure opens the endpoint's circuit (in this dispatcher's memory), for a minute.
    const harness = await startHarness({ name: 'single-skew', merchants: [merchant], retryDelaysMs: [], settings: { breakerThreshold: 1, breakerCooldownMs: 60_000 } });
    try {
      await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await harness.test.readStream(harness.names.failed, 1);
      // A webhook first seen by a dispatcher whose clock is 5 s ahead of this one's (an endpoint's
      // share of a fan-out handed on; an ordered webhook woken carries PostgreSQL's clock instead).
      await harness.test.publishRaw(harness.names.dispatch, Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id))), {
        messageId: 'evt_skewed',
        contentType: 'application/json',
        headers: { [HEADERS.endpointId]: merchant.endpoints[0]!.id, [HEADERS.webhookId]: 'evt_skewed', [HEADERS.firstSeenAt]: new Date(Date.now() + 5_000).toISOString() },
      });
      await waitFor('it settled', () => harness.dispatcher.stats.failed + harness.dispatcher.stats.invalid === 2, 10_000);
      // Failed (resendable) after its one attempt, as any webhook of a single-attempt schedule: not parked as invalid.
      const parked = harness.dispatcher.stats.invalid > 0 ? (await harness.test.drain(harness.names.invalid, 1))[0]!.properties.headers?.[HEADERS.invalidReason] : undefined;
      expect(parked).toBeUndefined();
      const entries = await harness.test.readStream(harness.names.failed, 2);
      expect(entries[1]!.properties.messageId).toBe('evt_skewed');
      expect(receiver.requests).toHaveLength(2);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});
