import { copyHeaders, HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { uniquePrefix } from '../support/broker.js';
import { capturingLogger } from '../support/capturing-logger.js';
import { type DispatcherAndRecorder, startDispatcherAndRecorder } from '../support/dispatcher-and-recorder.js';
import { testMerchant, testSecret } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { fieldTable, publishWithLargeHeaders } from '../support/raw-publish.js';
import { Receiver, type ReceivedRequest } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const deliveriesOf = (receiver: Receiver, webhookId: string): ReceivedRequest[] => receiver.requests.filter((r) => r.headers['webhook-id'] === webhookId);

/**
 * What an upstream may publish to the idempotent intake, found by a review (2026-11-30): bytes
 * amqplib cannot carry on a copy (a messageId, a header name), a repeat of an event parked before
 * it could be delivered (and its parked copy moved back), a corrected body under the same
 * messageId, a lone surrogate in a reference, the platform's merchant id; and (a later review) a
 * messageId holding a NUL on a copy whose places in order are looked up. Each was seen failing
 * on the code before its fix. One dispatcher as deployed (the intake check on, waits in
 * PostgreSQL, the operational endpoint set) and the recorder.
 */
describe('idempotent intake against what an upstream publishes', () => {
  const prefix = uniquePrefix('intake-upstream');
  const names = topologyNames(prefix);
  const merchant = testMerchant('m_iu', 'http://placeholder');
  let receiver: Receiver;
  let deployed: DispatcherAndRecorder;
  const lines: Array<Record<string, unknown>> = [];

  const publish = (body: object, options: Record<string, unknown> = {}) => deployed.publish('x', body, options);

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
      database: 'intake_upstream',
      dispatcherEnv: {
        SECRETS_KEY: TEST_SECRETS_KEY, OPERATIONAL_WEBHOOK_URL: `${receiver.url}/ops`, OPERATIONAL_WEBHOOK_SECRET: testSecret(),
        RETRY_SCHEDULE: '200ms', WAIT_LEASE: '5s', DELIVERY_TIMEOUT_MS: '2000', ALLOW_PRIVATE_TARGETS: 'true', METRICS_PORT: '0',
      },
      before: ({ database }) => seedMerchants(database.url, [merchant]),
      logger: capturingLogger(lines),
    });
  });

  afterAll(async () => {
    await deployed?.close();
    await receiver?.close();
  });

  it('parks a messageId of bytes that are not UTF-8 once, as invalid-message-id, not in a loop of unexpected errors', async () => {
    // 100 bytes 0xFF: amqplib reads 100 U+FFFD, 300 bytes as UTF-8, more than a copy's messageId can hold (255).
    const before = await deployed.test.messageCount(names.invalid);
    const body = Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id)));
    await publishWithLargeHeaders(deployed.test.connection, names.events, 'payout', body, Buffer.alloc(100, 0xff), {});
    const [parked] = await deployed.test.drain(names.invalid, before + 1);
    expect({
      code: parked!.properties.headers?.[HEADERS.invalidCode],
      failedMoves: lines.filter((line) => /unexpected error|could not be moved/.test(String(line.message))).length,
    }).toEqual({ code: 'invalid-message-id', failedMoves: 0 });
  }, 30_000);

  it('carries on a message with a header whose name amqplib cannot write again (not UTF-8): a fan-out, a park', async () => {
    // A merchant with two endpoints: its event is fanned out, each share a copy moved to dispatch.
    const fanned = testMerchant('m_iu_fan', receiver.url);
    fanned.endpoints = [
      { ...fanned.endpoints[0]!, id: 'ep_iu_a', url: `${receiver.url}/a` },
      { ...fanned.endpoints[0]!, id: 'ep_iu_b', url: `${receiver.url}/b` },
    ];
    await seedMerchants(deployed.database.url, [fanned]);
    await waitFor('merchant loaded', () => deployed.program.merchants.byId(fanned.id) !== undefined, 10_000);
    const table = fieldTable([[Buffer.alloc(100, 0xff), 'x'], [Buffer.from('x-upstream-note'), 'kept']]);
    const body = Buffer.from(JSON.stringify(sampleEvent('payout', fanned.id)));
    await publishWithLargeHeaders(deployed.test.connection, names.events, 'payout', body, 'evt_iu_header_fan', table);
    await waitFor('both endpoints delivered', () => deliveriesOf(receiver, 'evt_iu_header_fan').length === 2, 10_000);
    // Parked (its merchant is nobody): the park is a copy too.
    const before = await deployed.test.messageCount(names.invalid);
    await publishWithLargeHeaders(deployed.test.connection, names.events, 'payout', Buffer.from(JSON.stringify(sampleEvent('payout', 'm_iu_nobody'))), 'evt_iu_header_park', table);
    const parked = (await deployed.test.drain(names.invalid, before + 1)).find((m) => m.properties.messageId === 'evt_iu_header_park');
    expect({
      code: parked?.properties.headers?.[HEADERS.invalidCode],
      note: parked?.properties.headers?.['x-upstream-note'],
      failedMoves: lines.filter((line) => /unexpected error|could not be moved/.test(String(line.message))).length,
    }).toEqual({ code: 'unknown-merchant', note: 'kept', failedMoves: 0 });
  }, 30_000);

  it('delivers a repeat published once the merchant exists of an event parked unknown-merchant: the park took no key', async () => {
    const late = testMerchant('m_iu_late', receiver.url);
    const before = await deployed.test.messageCount(names.invalid);
    // Published a moment before the merchant was made (or before this dispatcher heard of it): parked.
    await publish(sampleEvent('payout', late.id), { messageId: 'evt_iu_late' });
    const parked = (await deployed.test.drain(names.invalid, before + 1)).find((m) => m.properties.messageId === 'evt_iu_late');
    expect(parked?.properties.headers?.[HEADERS.invalidCode]).toBe('unknown-merchant');
    await seedMerchants(deployed.database.url, [late]);
    await waitFor('merchant loaded', () => deployed.program.merchants.byId(late.id) !== undefined, 10_000);
    // Upstream, told of the park, publishes the event again: its idempotency key is the same.
    await publish(sampleEvent('payout', late.id), { messageId: 'evt_iu_late' });
    await waitFor('the repeat delivered', () => deliveriesOf(receiver, 'evt_iu_late').length === 1, 10_000);
    // And a repeat of that one is a repeat.
    await publish(sampleEvent('payout', late.id), { messageId: 'evt_iu_late' });
    await publish(sampleEvent('payout', late.id), { messageId: 'evt_iu_late_marker' });
    await waitFor('the marker delivered', () => deliveriesOf(receiver, 'evt_iu_late_marker').length === 1, 10_000);
    expect(deliveriesOf(receiver, 'evt_iu_late')).toHaveLength(1);
  }, 40_000);

  it('says when a repeat it drops has another body than its original (upstream corrected the event), and not when it is the same', async () => {
    const changed = () => lines.filter((line) => /unlike its original/.test(String(line.message)) && line.webhookId === 'evt_iu_corrected').map((line) => line.webhookId);
    await publish({ merchantId: merchant.id, event: 'payout', data: { reference: 'PO-IU-1', amount: 100 } }, { messageId: 'evt_iu_corrected' });
    await waitFor('the first delivered', () => deliveriesOf(receiver, 'evt_iu_corrected').length === 1, 10_000);
    // The same event again, byte for byte (a lost confirm), then corrected under the same messageId.
    await publish({ merchantId: merchant.id, event: 'payout', data: { reference: 'PO-IU-1', amount: 100 } }, { messageId: 'evt_iu_corrected' });
    await publish({ merchantId: merchant.id, event: 'payout', data: { reference: 'PO-IU-1', amount: 120 } }, { messageId: 'evt_iu_corrected' });
    await publish(sampleEvent('payout', merchant.id), { messageId: 'evt_iu_corrected_marker' });
    await waitFor('the marker delivered', () => deliveriesOf(receiver, 'evt_iu_corrected_marker').length === 1, 10_000);
    // Said once: for the corrected body, not the repeat byte for byte.
    await waitFor('the changed repeat said', () => changed().length > 0, 5_000);
    expect({ delivered: deliveriesOf(receiver, 'evt_iu_corrected').length, said: changed() }).toEqual({ delivered: 1, said: ['evt_iu_corrected'] });
  }, 40_000);

  it('parks a reference holding a lone surrogate (\\ud800) before its key, where PostgreSQL refused it in the retry\'s wait', async () => {
    const before = await deployed.test.messageCount(names.invalid);
    // JSON.stringify writes a lone surrogate as its escape, as a careless serialiser may.
    await publish({ merchantId: merchant.id, event: 'payout', data: { reference: 'PO-\ud800' } }, { messageId: 'retry_iu_surrogate' });
    const parked = (await deployed.test.drain(names.invalid, before + 1)).find((m) => m.properties.messageId === 'retry_iu_surrogate');
    expect({
      code: parked?.properties.headers?.[HEADERS.invalidCode],
      attempts: deliveriesOf(receiver, 'retry_iu_surrogate').length,
      keys: (await deployed.database.query("SELECT 1 FROM intake_keys WHERE webhook_id = 'retry_iu_surrogate'")).length,
    }).toEqual({ code: 'missing-reference', attempts: 0, keys: 0 });
  }, 30_000);

  it('drops a parked copy moved back by hand once the event published again was delivered: the key decides for it too', async () => {
    const late = testMerchant('m_iu_late_2', receiver.url);
    const before = await deployed.test.messageCount(names.invalid);
    await publish(sampleEvent('payout', late.id), { messageId: 'evt_iu_moved_back' });
    const parked = (await deployed.test.drain(names.invalid, before + 1)).filter((m) => m.properties.messageId === 'evt_iu_moved_back');
    expect(parked).toHaveLength(1);
    await seedMerchants(deployed.database.url, [late]);
    await waitFor('merchant loaded', () => deployed.program.merchants.byId(late.id) !== undefined, 10_000);
    // Upstream publishes it again, and it is delivered and in the log...
    await publish(sampleEvent('payout', late.id), { messageId: 'evt_iu_moved_back' });
    await waitFor('the new publish delivered', () => deliveriesOf(receiver, 'evt_iu_moved_back').length === 1, 10_000);
    await waitFor('in the log', async () => (await deployed.database.query("SELECT 1 FROM delivery_webhooks WHERE webhook_id = 'evt_iu_moved_back'")).length === 1, 15_000);
    // ...then the operator's `webhooks invalid requeue --code unknown-merchant` (its move, by hand).
    const duplicates = deployed.program.dispatcher.stats.duplicates;
    for (const m of parked) {
      await deployed.test.publishRaw(names.dispatch, m.content, { messageId: m.properties.messageId, contentType: 'application/json', headers: copyHeaders(m.properties.headers, { from: 'parked', unpark: true, upstreamExchange: names.events, dispatch: names.dispatch }) });
    }
    await waitFor('the moved-back copy taken', () => deployed.program.dispatcher.stats.duplicates > duplicates || deliveriesOf(receiver, 'evt_iu_moved_back').length > 1, 10_000);
    expect(deliveriesOf(receiver, 'evt_iu_moved_back')).toHaveLength(1);
  }, 60_000);

  it("parks at once a messageId holding a NUL that names an ordered merchant's reference and looks walked before: not held for ever on a place look-up PostgreSQL refused", async () => {
    // Upstream republishes a copy it took from invalid (it carries the park's x-original-routing-key),
    // as a dispatcher's broker redelivery would look: its places are looked up before its park.
    const ordered = testMerchant('m_iu_ordered', receiver.url);
    ordered.endpoints[0]!.orderByReference = true;
    await seedMerchants(deployed.database.url, [ordered]);
    await waitFor('merchant loaded', () => deployed.program.merchants.byId(ordered.id) !== undefined, 10_000);
    const before = await deployed.test.messageCount(names.invalid);
    await publish({ merchantId: ordered.id, event: 'charge.completed', data: { tnxRef: 'TX-IU-NUL' } }, { messageId: 'evt_iu\u0000nul', headers: { [HEADERS.originalRoutingKey]: 'charge.completed' } });
    const parked = (await deployed.test.drain(names.invalid, before + 1).catch(() => [])).find((m) => m.properties.messageId === 'evt_iu\u0000nul');
    expect({
      code: parked?.properties.headers?.[HEADERS.invalidCode],
      held: lines.filter((line) => /not looked up/.test(String(line.message))).map((line) => line.message),
    }).toEqual({ code: 'invalid-message-id', held: [] });
  }, 30_000);

  it("parks a merchant's event published under the platform's own merchant id: never signed for the operational endpoint", async () => {
    const before = await deployed.test.messageCount(names.invalid);
    await publish({ merchantId: 'platform:operational', event: 'payout', data: { reference: 'PO-IU-PLATFORM' } }, { messageId: 'evt_iu_platform' });
    const parked = (await deployed.test.drain(names.invalid, before + 1).catch(() => [])).find((m) => m.properties.messageId === 'evt_iu_platform');
    expect({ code: parked?.properties.headers?.[HEADERS.invalidCode], sent: deliveriesOf(receiver, 'evt_iu_platform').map((r) => r.path) }).toEqual({ code: 'unknown-merchant', sent: [] });
  }, 30_000);
});
