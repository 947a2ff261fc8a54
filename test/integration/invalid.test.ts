import { readFileSync } from 'node:fs';
import type { GetMessage } from 'amqplib';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

describe('messages that cannot be processed', () => {
  let receiver: Receiver;
  let harness: Harness;
  const merchant = testMerchant('m_ok', 'http://placeholder');

  beforeAll(async () => {
    receiver = await Receiver.start();
    merchant.endpoints[0]!.url = receiver.url;
    harness = await startHarness({ name: 'invalid', merchants: [merchant], settings: { maxMessageBytes: 2048 } });
  });

  afterAll(async () => {
    await harness?.close();
    await receiver?.close();
  });

  async function parkedAfterPublishing(body: string | Buffer, messageId: string): Promise<GetMessage> {
    await harness.test.publishRaw(harness.names.dispatch, Buffer.isBuffer(body) ? body : Buffer.from(body), {
      messageId,
      headers: { 'x-upstream': 'billing' },
    });
    const [parked] = await harness.test.drain(harness.names.invalid, 1);
    return parked!;
  }

  const valid = () => sampleEvent('charge.completed', merchant.id);
  const cases: Array<[string, () => string | Buffer, string, RegExp]> = [
    ['a body that is not JSON', () => 'not json {', 'not-json', /^not-json: body is not UTF-8 JSON/],
    ['a body that is not UTF-8', () => Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), 'not-json', /^not-json/],
    // V8's own message would quote the text around the fault, the card number with it, into the reason and the log.
    ['a body broken beside a card number', () => '{"card":"4111111111111111","cvv":tru}', 'not-json', /^not-json: body is not UTF-8 JSON$/],
    ['a body broken at a known position', () => '{"card":"4111111111111111" "cvv":1}', 'not-json', /^not-json: body is not UTF-8 JSON \(at position 27\)$/],
    // Spec 2.5's samples write the customer's phone so; publishing.md tells upstream teams to send a string.
    [
      "a phone written as the spec's samples write it, a bare number with a leading zero",
      () => JSON.stringify(valid()).replace('"phone":"08012345678"', '"phone":08012345678'),
      'not-json',
      /^not-json: body is not UTF-8 JSON/,
    ],
    ['a JSON array', () => '[1,2]', 'invalid-envelope', /^invalid-envelope: body: /],
    ['no merchantId', () => JSON.stringify({ ...valid(), merchantId: undefined }), 'invalid-envelope', /^invalid-envelope: merchantId: /],
    ['an unknown event', () => JSON.stringify({ ...valid(), event: 'charge.created' }), 'invalid-envelope', /^invalid-envelope: event: /],
    ['data that is not an object', () => JSON.stringify({ ...valid(), data: 'x' }), 'invalid-envelope', /^invalid-envelope: data: /],
    [
      'a collection without tnxRef',
      () => JSON.stringify({ ...valid(), data: { ...valid().data, tnxRef: undefined } }),
      'missing-reference',
      /^missing-reference: charge\.completed needs data\.tnxRef/,
    ],
    [
      'a payout whose reference is a number',
      () => JSON.stringify({ ...sampleEvent('payout', merchant.id), data: { reference: 12345 } }),
      'missing-reference',
      /^missing-reference: payout needs data\.reference/,
    ],
    [
      'a refund with neither reference',
      () => JSON.stringify({ ...sampleEvent('refund.completed', merchant.id), data: { amount: 1 } }),
      'missing-reference',
      /^missing-reference: refund\.completed needs data\.refundRef or data\.tnxRef/,
    ],
    ['a body above the size limit', () => JSON.stringify({ ...valid(), padding: 'x'.repeat(4096) }), 'too-large', /^too-large: body is \d+ bytes, the limit is 2048/],
    ['a merchant not in the directory', () => JSON.stringify({ ...valid(), merchantId: 'm_ghost' }), 'unknown-merchant', /^unknown-merchant: no merchant m_ghost/],
  ];

  it.each(cases)('parks %s in invalid with its reason, body and properties intact', async (_name, body, code, reason) => {
    const content = body();
    const messageId = `evt_${code}_${Math.random()}`;
    const parked = await parkedAfterPublishing(content, messageId);

    expect(parked.content.equals(Buffer.isBuffer(content) ? content : Buffer.from(content))).toBe(true);
    expect(parked.properties.messageId).toBe(messageId);
    expect(parked.properties.headers![HEADERS.invalidCode]).toBe(code);
    expect(parked.properties.headers![HEADERS.invalidReason]).toMatch(reason);
    expect(parked.properties.headers!['x-upstream']).toBe('billing');
    expect(parked.properties.headers![HEADERS.originalRoutingKey]).toBe(harness.names.dispatch);
    expect(receiver.requests).toHaveLength(0);
  });

  it("tells upstream teams, where the message contract is, that the spec's bare phone number is not JSON and is parked", () => {
    const text = readFileSync('docs/publishing.md', 'utf8');
    expect(text).toMatch(/`"phone": 08012345678`[^.]*is not JSON/);
    expect(text).toMatch(/parked in `webhooks\.invalid` as `not-json`/);
  });

  it('keeps delivering valid events after parking invalid ones', async () => {
    await harness.test.publishRaw(harness.names.dispatch, Buffer.from('garbage'));
    const message = valid();
    await harness.publisher.publish(message);
    const [request] = await receiver.waitForRequests(1);
    expect(JSON.parse(request!.body).data.tnxRef).toBe(message.data.tnxRef);
    await harness.test.drain(harness.names.invalid, 1);
    // Counted once the park's publish is confirmed and the message acked, which comes after the
    // broker has put it in invalid (where drain finds it): a moment later, longer under load.
    await waitFor('every park counted', () => harness.dispatcher.stats.invalid >= cases.length + 1, 10_000);
    expect(harness.dispatcher.stats.invalid).toBe(cases.length + 1);
  });
});
