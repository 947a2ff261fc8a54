import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { ConsumeMessage } from 'amqplib';
import { webhookIdOf } from '../../apps/dispatcher/stages/intake.js';

/**
 * docs/guarantees.md tells merchants and upstream teams how a webhook-id is made when upstream sends
 * no messageId; this holds the code to it, and the page to what the code does.
 */
function message(body: string, messageId?: string): ConsumeMessage {
  return {
    content: Buffer.from(body),
    fields: { exchange: 'test.events', routingKey: 'payout', deliveryTag: 1, redelivered: false, consumerTag: 'c' },
    properties: { messageId, headers: {} },
  } as unknown as ConsumeMessage;
}

const body = '{"merchantId":"m_1","event":"payout","data":{"reference":"PO-1","amount":5000}}';

describe('the webhook-id of a message', () => {
  it('is the messageId when upstream gave one', () => {
    expect(webhookIdOf(message(body, 'evt_123'))).toBe('evt_123');
  });

  it('is derived from the body when upstream gave none: identical bodies share one id', () => {
    const first = webhookIdOf(message(body));
    expect(webhookIdOf(message(body))).toBe(first);
    expect(webhookIdOf(message(body, ''))).toBe(first);
  });

  it('differs for bodies that differ in any byte, the key order or spacing included', () => {
    const first = webhookIdOf(message(body));
    expect(webhookIdOf(message(body.replace('5000', '5001')))).not.toBe(first);
    expect(webhookIdOf(message(body.replace('"data":', '"data": ')))).not.toBe(first);
    expect(webhookIdOf(message(body.replace('"merchantId":"m_1"', '"merchantId":"m_2"')))).not.toBe(first);
  });

  it('is made as docs/guarantees.md says: msg_ and the first 32 hex digits of the SHA-256 of the body', () => {
    const page = readFileSync('docs/guarantees.md', 'utf8').replace(/\s+/g, ' ');
    expect(page).toContain('it is `msg_` followed by the first 32 hex digits of the SHA-256 of the message body\'s bytes');
    const expected = `msg_${createHash('sha256').update(body).digest('hex').slice(0, 32)}`;
    expect(webhookIdOf(message(body))).toBe(expected);
  });
});
