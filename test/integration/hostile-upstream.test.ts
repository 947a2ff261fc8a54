import { copyHeaders, sampleEvent } from '../../libs/contracts/index.js';
import { deliveryLogQueries, openPostgres } from '../../libs/delivery-store/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { uniquePrefix } from '../support/broker.js';
import { type DispatcherAndRecorder, startDispatcherAndRecorder } from '../support/dispatcher-and-recorder.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { publishWithLargeHeaders } from '../support/raw-publish.js';
import { Receiver, type ReceivedRequest } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const deliveriesOf = (receiver: Receiver, webhookId: string): ReceivedRequest[] => receiver.requests.filter((r) => r.headers['webhook-id'] === webhookId);

/**
 * What an upstream team's client may send, hostile or broken, found by a review (2026-11-29): a NUL
 * in a header or in merchantId, and a message parked for a merchant that does not exist yet. None
 * may wedge a dispatcher's waits, turn the intake dedupe off, or reach a merchant's log. One
 * dispatcher as deployed (the intake check on, waits in PostgreSQL) and the recorder.
 */
describe('hostile upstream messages', () => {
  const prefix = uniquePrefix('hostile-upstream');
  const names = topologyNames(prefix);
  const merchant = testMerchant('m_rdd', 'http://placeholder');
  let receiver: Receiver;
  let deployed: DispatcherAndRecorder;

  /** Publishes raw to upstream's exchange, as any upstream client can. */
  const publish = (body: unknown, options: Record<string, unknown> = {}) => deployed.publish('x', body, options);

  beforeAll(async () => {
    // 500 to the first attempt of each webhook whose id starts with "retry_", 204 otherwise.
    const seen = new Set<string>();
    receiver = await Receiver.start((_n, req) => {
      const id = String(req.headers['webhook-id']);
      if (!id.startsWith('retry_') || seen.has(id)) return 204;
      seen.add(id);
      return 500;
    });
    merchant.endpoints[0]!.url = receiver.url;
    deployed = await startDispatcherAndRecorder({
      prefix,
      database: 'hostile_upstream',
      env: { SECRETS_KEY: TEST_SECRETS_KEY },
      before: ({ database }) => seedMerchants(database.url, [merchant]),
      dispatcherEnv: { RETRY_SCHEDULE: '200ms,200ms', WAIT_LEASE: '5s', DELIVERY_TIMEOUT_MS: '2000', ALLOW_PRIVATE_TARGETS: 'true', METRICS_PORT: '0' },
    });
  });

  afterAll(async () => {
    await deployed?.close();
    await receiver?.close();
  });

  it('does not carry a header holding a NUL into the wait: that webhook and the others are retried', async () => {
    // The poison: a retry whose wait carries upstream's header with U+0000.
    await publish(sampleEvent('payout', merchant.id), { messageId: 'retry_poison', headers: { 'x-upstream-note': 'a\u0000b' } });
    await waitFor('the poison first attempt', () => deliveriesOf(receiver, 'retry_poison').length >= 1, 10_000);
    // An ordinary webhook whose first attempt fails: its retry must come 200 ms later.
    await publish(sampleEvent('payout', merchant.id), { messageId: 'retry_ordinary' });
    await waitFor('the ordinary first attempt', () => deliveriesOf(receiver, 'retry_ordinary').length >= 1, 10_000);
    await waitFor('the ordinary webhook retried', () => deliveriesOf(receiver, 'retry_ordinary').length >= 2, 20_000);
    await waitFor('the one with the NUL retried', () => deliveriesOf(receiver, 'retry_poison').length >= 2, 20_000);
  }, 40_000);

  it('parks the NUL as an invalid envelope, and the intake dedupe goes on: a messageId published twice is delivered once', async () => {
    // Parked before the intake check (PostgreSQL refuses a NUL: the check failed, and skipped every key for 10 s)...
    await publish({ merchantId: 'm_nobody\u0000', event: 'payout', data: { reference: 'PO-1' } }, { messageId: 'evt_nul_merchant' });
    await waitFor('the NUL merchant parked', async () => (await deployed.test.messageCount(names.invalid)) === 1, 10_000);
    // ...but then an ordinary event published twice.
    await publish(sampleEvent('payout', merchant.id), { messageId: 'evt_twice' });
    await waitFor('delivered', () => deliveriesOf(receiver, 'evt_twice').length >= 1, 10_000);
    await publish(sampleEvent('payout', merchant.id), { messageId: 'evt_twice' });
    await publish(sampleEvent('payout', merchant.id), { messageId: 'evt_marker' });
    await waitFor('marker delivered', () => deliveriesOf(receiver, 'evt_marker').length >= 1, 10_000);
    expect(deliveriesOf(receiver, 'evt_twice')).toHaveLength(1);
  }, 40_000);

  it('never shows a message parked for another merchant id in a merchant\'s log, nor changes a delivered webhook\'s status', async () => {
    await publish(sampleEvent('payout', merchant.id), { messageId: 'evt_victim' });
    await waitFor('delivered', () => deliveriesOf(receiver, 'evt_victim').length >= 1, 10_000);
    const db = openPostgres(deployed.database.url, { maxConnections: 1 });
    try {
      const log = deliveryLogQueries(db);
      await waitFor('victim recorded', async () => (await log.getWebhook(merchant.id, 'evt_victim'))?.status === 'delivered', 15_000);
      // "m_rdd\u0000" is no merchant: parked (its NUL once stripped by the recorder, the record landed in m_rdd's log).
      await publish({ merchantId: `${merchant.id}\u0000`, event: 'payout', data: { reference: 'PO-2' } }, { messageId: 'evt_victim' });
      await publish({ merchantId: `${merchant.id}\u0000`, event: 'payout', data: { reference: 'PO-3' } }, { messageId: 'evt_ghost' });
      await waitFor('parked', async () => (await deployed.test.messageCount(names.invalid)) >= 3, 10_000);
      await publish(sampleEvent('payout', merchant.id), { messageId: 'evt_marker_c' });
      await waitFor('marker recorded', async () => (await log.getWebhook(merchant.id, 'evt_marker_c')) !== undefined, 15_000);
      const victim = await log.getWebhook(merchant.id, 'evt_victim');
      const feed = await log.feed(merchant.id, undefined, 100);
      expect({
        victim: victim?.status,
        victimInFeed: feed.events.find((e) => e.webhookId === 'evt_victim')?.status,
        ghost: (await log.getWebhook(merchant.id, 'evt_ghost'))?.status,
      }).toEqual({ victim: 'delivered', victimInFeed: 'delivered', ghost: undefined });
    } finally {
      await db.close();
    }
  }, 60_000);

  it('shows a webhook delivered after an unknown-merchant park, the merchant added and the message requeued, as delivered', async () => {
    const late = testMerchant('m_rdd_late', receiver.url);
    // Published before the merchant exists: parked unknown-merchant.
    const before = await deployed.test.messageCount(names.invalid);
    await publish(sampleEvent('payout', late.id), { messageId: 'evt_late' });
    await waitFor('parked', async () => (await deployed.test.messageCount(names.invalid)) === before + 1, 10_000);
    // The operator adds the merchant, then `webhooks invalid requeue --code unknown-merchant` (its move, by hand).
    await seedMerchants(deployed.database.url, [late]);
    await waitFor('merchant loaded', () => deployed.program.merchants.byId(late.id) !== undefined, 10_000);
    const got = (await deployed.test.drain(names.invalid, before + 1)).filter((m) => m.properties.messageId === 'evt_late');
    for (const m of got) {
      await deployed.test.publishRaw(names.dispatch, m.content, { messageId: m.properties.messageId, contentType: 'application/json', headers: copyHeaders(m.properties.headers, { from: 'parked', unpark: true, upstreamExchange: names.events, dispatch: names.dispatch }) });
    }
    await waitFor('delivered', () => deliveriesOf(receiver, 'evt_late').length >= 1, 10_000);
    const db = openPostgres(deployed.database.url, { maxConnections: 1 });
    try {
      const log = deliveryLogQueries(db);
      const shown = await waitFor('recorded', async () => {
        const w = await log.getWebhook(late.id, 'evt_late');
        return w && w.records.some((r) => r.outcome === 'delivered') && w;
      }, 15_000);
      const feed = await log.feed(late.id, undefined, 100);
      expect({ detail: shown.status, feed: feed.events.find((e) => e.webhookId === 'evt_late')?.status }).toEqual({ detail: 'delivered', feed: 'delivered' });
    } finally {
      await db.close();
    }
  }, 60_000);

  it('parks a message whose headers no copy could carry, at once and without them, where its wait was never handed back', async () => {
    // 100 KB of headers: any client but amqplib sends them (up to the frame size); amqplib, which
    // publishes the dispatcher's copies, encodes at most 64 KiB. Its first attempt would fail (retry_).
    const before = await deployed.test.messageCount(names.invalid);
    const body = Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id)));
    await publishWithLargeHeaders(deployed.test.connection, names.events, 'payout', body, 'retry_large_headers', { 'x-upstream-note': 'a'.repeat(100_000) });
    const [parked] = (await deployed.test.drain(names.invalid, before + 1)).filter((m) => m.properties.messageId === 'retry_large_headers');
    expect({
      code: parked?.properties.headers?.['x-invalid-code'],
      reason: parked?.properties.headers?.['x-invalid-reason'],
      carried: parked?.properties.headers?.['x-upstream-note'],
      attempts: deliveriesOf(receiver, 'retry_large_headers').length,
    }).toEqual({ code: 'too-large', reason: expect.stringMatching(/^too-large: headers are \d+ bytes, the limit is 32768; parked without them$/), carried: undefined, attempts: 0 });
    expect(parked!.content.equals(body)).toBe(true);
  }, 30_000);
});
