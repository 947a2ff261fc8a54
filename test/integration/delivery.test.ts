import { Webhook } from 'standardwebhooks';
import { EVENT_NAMES, sampleEvent } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

describe('delivery to the merchant', () => {
  let receiver: Receiver;
  let merchant: Merchant;
  let disabled: Merchant;
  let noWebhook: Merchant;
  let harness: Harness;

  beforeAll(async () => {
    receiver = await Receiver.start();
    merchant = testMerchant('m_live', receiver.url);
    disabled = testMerchant('m_off', receiver.url);
    disabled.endpoints[0]!.enabled = false;
    noWebhook = testMerchant('m_none', receiver.url, { endpoints: [] });
    harness = await startHarness({ name: 'delivery', merchants: [merchant, disabled, noWebhook] });
  });

  afterAll(async () => {
    await harness?.close();
    await receiver?.close();
  });

  beforeEach(() => {
    receiver.requests.length = 0;
  });

  it.each(EVENT_NAMES)('delivers %s with the exact body and a signature standardwebhooks verifies', async (event) => {
    const message = sampleEvent(event, merchant.id);
    const { messageId } = await harness.publisher.publish(message);

    const [request] = await receiver.waitForRequests(1);
    expect(request!.method).toBe('POST');
    expect(request!.path).toBe('/webhooks');
    expect(request!.headers['content-type']).toBe('application/json');
    expect(request!.headers['user-agent']).toBe('test-dispatcher');
    expect(request!.headers['webhook-id']).toBe(messageId);
    expect(request!.body).toBe(JSON.stringify({ event, data: message.data }));
    const verified = new Webhook(merchant.endpoints[0]!.secret).verify(request!.body, request!.headers as Record<string, string>);
    expect(verified).toEqual({ event, data: message.data });
  });

  it('rejects a tampered body when verifying, so the signature covers the body', async () => {
    await harness.publisher.publish(sampleEvent('payout', merchant.id));
    const [request] = await receiver.waitForRequests(1);
    const tampered = request!.body.replace('"amount":25000', '"amount":99999');
    expect(() => new Webhook(merchant.endpoints[0]!.secret).verify(tampered, request!.headers as Record<string, string>)).toThrow();
  });

  it('relays data byte for byte: extra fields, nulls, strings and numbers, big integers and decimals', async () => {
    const data =
      '{"tnxRef":"4f6c2a57-1b8e-4a51-9d0e-2f1c7e9b3a10","sourceAmount":1000.50,"destinationAmount":12345678901234567890,' +
      '"narration":"Collections ","phone":"08012345678","customer":{"id":7,"phone":8012345678,"email":null},' +
      '"newField":{"nested":[1,"two",null,true]},"status":"successful","unicode":"caf\\u00e9 ✓"}';
    const raw = `{"merchantId":"${merchant.id}","event":"charge.completed","data":${data},"upstreamOnly":1}`;
    await harness.test.publishRaw(harness.names.dispatch, Buffer.from(raw), { messageId: 'evt_raw_1' });

    const [request] = await receiver.waitForRequests(1);
    expect(request!.body).toBe(`{"event":"charge.completed","data":${data}}`);
    new Webhook(merchant.endpoints[0]!.secret).verify(request!.body, request!.headers as Record<string, string>);
  });

  it('gives a message without messageId the same derived webhook-id on every delivery', async () => {
    const body = Buffer.from(JSON.stringify(sampleEvent('refund.completed', merchant.id)));
    await harness.test.publishRaw(harness.names.dispatch, body);
    await harness.test.publishRaw(harness.names.dispatch, body);

    const requests = await receiver.waitForRequests(2);
    expect(requests[0]!.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(requests[1]!.headers['webhook-id']).toBe(requests[0]!.headers['webhook-id']);
  });

  it('sends nothing to a merchant whose webhook is disabled or not set up, and acks the event', async () => {
    const skippedBefore = harness.dispatcher.stats.skipped;
    await harness.publisher.publish(sampleEvent('charge.completed', disabled.id));
    await harness.publisher.publish(sampleEvent('payout', noWebhook.id));
    await waitFor('both events skipped', () => harness.dispatcher.stats.skipped === skippedBefore + 2);

    // A later event to a live merchant arrives first and alone: nothing was sent for the skipped two.
    await harness.publisher.publish(sampleEvent('payout', merchant.id));
    await receiver.waitForRequests(1);
    expect(receiver.requests).toHaveLength(1);
    expect(JSON.parse(receiver.requests[0]!.body).event).toBe('payout');
    await waitFor('dispatch queue empty', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0);
    expect(await harness.test.messageCount(harness.names.invalid)).toBe(0);
  });

  // Last: it stops the file's dispatcher (its close stops it again).
  it('consumes dispatch once when started twice, and stops twice', async () => {
    const consumers = async () => (await harness.test.channel.checkQueue(harness.names.dispatch)).consumerCount;
    expect(await consumers()).toBe(1);
    await Promise.all([harness.dispatcher.start(), harness.dispatcher.start()]);
    expect(await consumers()).toBe(1);
    await Promise.all([harness.dispatcher.stop(), harness.dispatcher.stop()]);
    // A quorum queue counts a cancelled consumer until the broker has taken the acks of what it held:
    // stop() waits for the last delivery's ack to be sent (the case before may still be settling its
    // webhook), not for the broker to have read it.
    await waitFor('no consumer on dispatch', async () => (await consumers()) === 0, 5_000);
    // Stopped, it stays stopped.
    await harness.dispatcher.start();
    expect(await consumers()).toBe(0);
  });
});
