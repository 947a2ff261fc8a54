import { endpointOf } from '../../apps/dispatcher/stages/endpoint-key.js';
import type { ConsumeMessage } from 'amqplib';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { TestBroker } from '../support/broker.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { forgetMerchants } from '../support/merchant-rows.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Every entry of a stream up to now: appends a marker and reads from the first offset until the
 * marker comes back, so "exactly one entry" is a fact, not a guess after a sleep.
 */
async function everyEntry(test: TestBroker, stream: string): Promise<ConsumeMessage[]> {
  const marker = `marker-${Math.random()}`;
  await test.publishRaw(stream, Buffer.from('{}'), { messageId: marker, headers: { [HEADERS.entryType]: 'marker' } });
  const ch = await test.connection.createChannel();
  await ch.prefetch(1000);
  const entries: ConsumeMessage[] = [];
  let done = false;
  const { consumerTag } = await ch.consume(
    stream,
    (msg) => {
      if (!msg) return;
      ch.ack(msg);
      if (msg.properties.messageId === marker) done = true;
      else if (msg.properties.headers?.[HEADERS.entryType] !== 'marker') entries.push(msg);
    },
    { noAck: false, arguments: { 'x-stream-offset': 'first' } },
  );
  try {
    await waitFor(`marker in ${stream}`, () => done);
    return entries;
  } finally {
    await ch.cancel(consumerTag).catch(() => {});
    await ch.close().catch(() => {});
  }
}

function header(entry: ConsumeMessage, name: string): unknown {
  return entry.properties.headers?.[name];
}

/** Waits until nothing is in flight or waiting: dispatch empty, no wait row, no delivery in hand. */
async function settled(harness: Harness): Promise<void> {
  const inFlight = (harness.dispatcher as unknown as { inFlight: Set<unknown> }).inFlight;
  await waitFor('the dispatcher to settle', async () => {
    if (inFlight.size > 0) return false;
    if ((await harness.test.messageCount(harness.names.dispatch)) > 0) return false;
    return (await harness.waits.census(0)).waiting === 0;
  }, 20_000, 50);
}

describe('one merchant never harms another', () => {
  it("keeps a healthy merchant's webhooks flowing when another merchant on the same host fails, and never spends an attempt on an open circuit", async () => {
    const host = await Receiver.start((_, req) => (req.path === '/a' ? 500 : 200));
    const origin = new URL(host.url).origin;
    const a = testMerchant('m_shared_a', `${origin}/a`);
    const b = testMerchant('m_shared_b', `${origin}/b`);
    const harness = await startHarness({
      name: 'sharedhost',
      merchants: [a, b],
      // A span (1.5 s) well past the row's announcement on a loaded machine: until then A's breaker lets hand-backs through.
      retryDelaysMs: [500, 500, 500],
      settings: { breakerThreshold: 3, breakerCooldownMs: 30_000 },
    });
    try {
      for (let i = 0; i < 10; i++) await harness.publisher.publish(sampleEvent('charge.completed', a.id));
      await waitFor("A's circuit open", () => harness.dispatcher.guards.openUntil(endpointOf(a.id, a.endpoints[0]!.id, a.endpoints[0]!.url)) > 0);
      for (let i = 0; i < 40; i++) await harness.publisher.publish(sampleEvent('payout', b.id));

      await waitFor('40 deliveries to B', () => host.requests.filter((r) => r.path === '/b').length >= 40, 15_000);
      const failed = await harness.test.readStream(harness.names.failed, 10, 15_000);
      await settled(harness);
      const entries = await everyEntry(harness.test, harness.names.failed);
      expect(entries.filter((e) => header(e, HEADERS.merchantId) === b.id)).toHaveLength(0);
      expect(entries).toHaveLength(10);
      for (const entry of failed) {
        // Each of A's failures had at least one real attempt and says why it failed.
        expect(header(entry, HEADERS.attempts)).toBeGreaterThanOrEqual(1);
        expect(['attempts-exhausted', 'circuit-open']).toContain(header(entry, HEADERS.failedReason));
        expect(header(entry, HEADERS.lastError)).toBe('HTTP 500');
      }
      // Real attempts to A: those sent before its breaker heard of the row (three opened it), then one
      // per webhook whose span ran out untried, and none of their retries.
      const attemptsOnA = host.requests.filter((r) => r.path === '/a').length;
      expect(attemptsOnA).toBeLessThanOrEqual(10 + 3);
      // The circuit (its row) parked A's waits: they failed for it when their span ended, not for
      // their attempts. (Not stats.circuitOpen: that counts postponements at admission, and a
      // parked wait never reaches admission unless it was picked before the row opened: 0 in a
      // loaded CI run.)
      expect(entries.filter((e) => header(e, HEADERS.failedReason) === 'circuit-open').length).toBeGreaterThan(0);
    } finally {
      await harness.close();
      await host.close();
    }
  });

  it("makes a resent webhook's first attempt through an open circuit, and its success closes the circuit", async () => {
    let healthy = false;
    const receiver = await Receiver.start(() => (healthy ? 200 : 503));
    const merchant = testMerchant('m_resent', receiver.url);
    const harness = await startHarness({
      name: 'resentcircuit',
      merchants: [merchant],
      retryDelaysMs: [60_000],
      settings: { breakerThreshold: 2, breakerCooldownMs: 60_000 },
    });
    try {
      await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('circuit open', () => harness.dispatcher.guards.openUntil(endpointOf(merchant.id, merchant.endpoints[0]!.id, merchant.endpoints[0]!.url)) > 0);
      healthy = true;
      // What the resend API publishes: straight to dispatch, fresh counters, x-resent-at.
      const resent = sampleEvent('payout', merchant.id);
      await harness.test.publishRaw(harness.names.dispatch, Buffer.from(JSON.stringify(resent)), {
        messageId: 'evt_resent_1',
        contentType: 'application/json',
        headers: { [HEADERS.resentAt]: new Date().toISOString(), [HEADERS.firstSeenAt]: new Date(Date.now() - 3_600_000).toISOString() },
      });
      const requests = await receiver.waitForRequests(3, 5_000);
      expect(requests[2]!.headers['webhook-id']).toBe('evt_resent_1');
      await waitFor('delivered', () => harness.dispatcher.stats.delivered === 1);
      // Its success closes the circuit's row, and the row the breaker (as every dispatcher's).
      await waitFor('the circuit closed, its row too', async () => harness.dispatcher.guards.openUntil(endpointOf(merchant.id, merchant.endpoints[0]!.id, merchant.endpoints[0]!.url)) === 0
        && (await harness.database.query('SELECT 1 FROM wait_circuits WHERE NOT closing')).length === 0, 5_000);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});

describe('a settings change never drops an accepted webhook', () => {
  async function retryingWhile(change: (harness: Harness, merchant: ReturnType<typeof testMerchant>) => Promise<void>) {
    const receiver = await Receiver.start(() => 500);
    const merchant = testMerchant('m_settings', receiver.url);
    const other = testMerchant('m_settings_other', receiver.url);
    const harness = await startHarness({ name: 'settings', merchants: [merchant, other], retryDelaysMs: [800] });
    try {
      const published = await harness.publisher.publish(sampleEvent('refund.completed', merchant.id));
      await receiver.waitForRequests(1);
      await waitFor('retry scheduled', () => harness.dispatcher.stats.retried === 1);
      await change(harness, merchant);
      const [entry] = await harness.test.readStream(harness.names.failed, 1, 10_000);
      // Its own webhook's requests: with test files in parallel, a closed receiver's port can be
      // handed to this one while another file's dispatcher still retries to it.
      expect(receiver.requests.filter((r) => r.headers['webhook-id'] === published.messageId)).toHaveLength(1);
      expect(entry!.properties.messageId).toBe(published.messageId);
      expect(header(entry!, HEADERS.attempts)).toBe(1);
      return { entry: entry!, harness };
    } finally {
      await harness.close();
      await receiver.close();
    }
  }

  it('sends a retry for a merchant whose webhook was disabled meanwhile to failed, with x-last-error "webhook disabled"', async () => {
    const { entry } = await retryingWhile(async (harness, merchant) => {
      await harness.setMerchants([{ ...merchant, endpoints: [{ ...merchant.endpoints[0]!, enabled: false }] }]);
    });
    expect(header(entry, HEADERS.lastError)).toBe('webhook disabled');
    expect(header(entry, HEADERS.failedReason)).toBe('webhook-disabled');
  });

  it('sends a retry whose event the webhook stopped receiving meanwhile to failed, resendable once it opts back in', async () => {
    const { entry } = await retryingWhile(async (harness, merchant) => {
      await harness.setMerchants([{ ...merchant, endpoints: [{ ...merchant.endpoints[0]!, events: ['payout'] }] }]);
    });
    expect(header(entry, HEADERS.lastError)).toBe("event not in the webhook's events");
    expect(header(entry, HEADERS.failedReason)).toBe('event-not-subscribed');
  });

  it('sends a retry for a merchant removed from the directory meanwhile to failed, never dropping it', async () => {
    // Deleted over a day ago: no row, and its tombstone past its day (a delete within the day drops it instead).
    const { entry } = await retryingWhile(async (harness, merchant) => {
      await forgetMerchants(harness.database.url, [merchant.id]);
      await harness.merchants.poll();
    });
    expect(header(entry, HEADERS.failedReason)).toBe('merchant-removed');
  });

  it('still skips a new event for a merchant whose webhook is disabled', async () => {
    const receiver = await Receiver.start();
    const merchant = testMerchant('m_disabled', receiver.url);
    merchant.endpoints[0]!.enabled = false;
    const harness = await startHarness({ name: 'disabled', merchants: [merchant], retryDelaysMs: [100] });
    try {
      await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('skipped', () => harness.dispatcher.stats.skipped === 1);
      expect(await everyEntry(harness.test, harness.names.failed)).toHaveLength(0);
      expect(receiver.requests).toHaveLength(0);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});

describe('a lost channel mid-move', () => {
  it('does not split one webhook into two retry chains when the consumer channel dies during a failed attempt', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const receiver = await Receiver.start((n) => (n === 0 ? { status: 500, delayMs: 1_500 } : 500));
    const merchant = testMerchant('m_split', receiver.url);
    const harness = await startHarness({ name: 'split', merchants: [merchant], retryDelaysMs: [200] });
    try {
      const published = await harness.publisher.publish(sampleEvent('charge.completed', merchant.id));
      await receiver.waitForRequests(1);
      // The consumer channel dies while the first attempt is in flight: the broker redelivers.
      const channels = (harness.broker as unknown as { consumerChannels: Map<{ close(): Promise<void> }, unknown> }).consumerChannels;
      await Promise.all([...channels.keys()].map((ch) => ch.close().catch(() => {})));
      release();
      await held;
      await receiver.waitForRequests(3, 15_000);
      await harness.test.readStream(harness.names.failed, 1, 15_000);
      await settled(harness);
      const entries = await everyEntry(harness.test, harness.names.failed);
      expect(entries.filter((e) => e.properties.messageId === published.messageId)).toHaveLength(1);
    } finally {
      await harness.close();
      await receiver.close();
    }
  });
});

describe('bad message properties at intake', () => {
  let harness: Harness;
  let receiver: Receiver;
  const merchant = testMerchant('m_intake', 'http://placeholder');

  beforeAll(async () => {
    receiver = await Receiver.start(() => 500);
    merchant.endpoints[0]!.url = receiver.url;
    harness = await startHarness({ name: 'intakeprops', merchants: [merchant], retryDelaysMs: [100, 100], settings: { breakerThreshold: 100 } });
  });

  afterAll(async () => {
    await harness.close();
    await receiver.close();
  });

  it('parks a messageId that cannot be an HTTP header in invalid without an attempt', async () => {
    const names = topologyNames(harness.prefix);
    const body = Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id)));
    const ch = await harness.test.connection.createConfirmChannel();
    ch.publish(names.events, 'payout', body, { persistent: true, messageId: 'evt_1\r\nx-injected: 1', contentType: 'application/json' });
    await ch.waitForConfirms();
    await ch.close();
    const [parked] = await harness.test.drain(names.invalid, 1);
    expect(header(parked as unknown as ConsumeMessage, HEADERS.invalidCode)).toBe('invalid-message-id');
    expect(receiver.requests).toHaveLength(0);
    expect(harness.dispatcher.guards.openEndpoints()).toEqual([]);
  });

  it('ignores bookkeeping headers an upstream set itself, and headers of the wrong type', async () => {
    const names = topologyNames(harness.prefix);
    const ch = await harness.test.connection.createConfirmChannel();
    // Upstream claims 99 attempts and a first sight in 2000: both are ours to keep, not theirs.
    ch.publish(names.events, 'payout', Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id))), {
      persistent: true,
      messageId: 'evt_claims',
      headers: { [HEADERS.attempts]: 99, [HEADERS.firstSeenAt]: '2000-01-01T00:00:00.000Z', [HEADERS.resentAt]: '2000-01-01T00:00:00.000Z' },
    });
    // On our own path, an array where a count belongs counts as absent.
    ch.sendToQueue(names.dispatch, Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id))), {
      persistent: true,
      messageId: 'evt_array',
      headers: { [HEADERS.attempts]: [5] },
    });
    await ch.waitForConfirms();
    await ch.close();
    const entries = await harness.test.readStream(names.failed, 2, 15_000);
    for (const entry of entries) {
      expect(header(entry, HEADERS.attempts)).toBe(3);
      expect(header(entry, HEADERS.failedReason)).toBe('attempts-exhausted');
    }
    const claims = entries.find((e) => e.properties.messageId === 'evt_claims')!;
    expect(Date.parse(String(header(claims, HEADERS.firstSeenAt)))).toBeGreaterThan(Date.parse('2026-01-01'));
    expect(header(claims, HEADERS.resentAt)).toBeUndefined();
  });
});
