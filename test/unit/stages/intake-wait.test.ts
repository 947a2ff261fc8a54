import type { ConsumeMessage } from 'amqplib';
import { copyHeaders, HEADERS } from '../../../libs/contracts/index.js';
import { failureEntryHeaders } from '../../../libs/failed/index.js';
import { handBackOf } from '../../../apps/dispatcher/stages/intake.js';

const EVENTS = 'webhooks.events';

function message(headers: Record<string, unknown>, exchange = ''): ConsumeMessage {
  return { content: Buffer.from('{}'), fields: { exchange }, properties: { headers } } as unknown as ConsumeMessage;
}

describe('a failure entry id', () => {
  const facts = { reason: 'attempts-exhausted', failedAt: new Date('2026-11-25T10:00:00.000Z'), attempts: 3, lastError: 'HTTP 500' };

  it('is fresh for every failure written, and dropped from a resent copy (the resender names the entry in x-resent-from-id)', () => {
    const one = failureEntryHeaders({ [HEADERS.webhookId]: 'evt_1' }, facts);
    const two = failureEntryHeaders({ [HEADERS.webhookId]: 'evt_1', [HEADERS.failureId]: one[HEADERS.failureId]! }, facts);
    expect(typeof one[HEADERS.failureId]).toBe('string');
    expect(two[HEADERS.failureId]).not.toBe(one[HEADERS.failureId]);
    expect(copyHeaders(one, { from: 'failure-entry' })[HEADERS.failureId]).toBeUndefined();
    // Nor the claim of an earlier resend: each resend names its own.
    expect(copyHeaders({ ...one, [HEADERS.claimId]: 'c-old' }, { from: 'failure-entry' })[HEADERS.claimId]).toBeUndefined();
  });
});

describe("a hand-back's wait read from its headers (handBackOf: for a park when intake fails)", () => {
  const ours = { [HEADERS.waitHand]: 3, [HEADERS.merchantId]: 'm_1', [HEADERS.endpointId]: 'ep_m_1_main', [HEADERS.ordered]: true };
  const withId = (m: ConsumeMessage) => ({ ...m, properties: { ...m.properties, messageId: 'evt_1' } }) as ConsumeMessage;

  it('is named by our scheduler on a message from our own side, the body never read', () => {
    expect(handBackOf(withId(message(ours)), EVENTS)).toEqual({ merchantId: 'm_1', webhookId: 'evt_1', endpointId: 'ep_m_1_main', hand: 3, ordered: true });
  });

  it("is never upstream's: the same headers on a message from upstream's exchange name no wait", () => {
    expect(handBackOf(withId(message(ours, EVENTS)), EVENTS)).toBeUndefined();
  });

  it('is none without a hand, or without its merchant', () => {
    expect(handBackOf(withId(message({ ...ours, [HEADERS.waitHand]: undefined })), EVENTS)).toBeUndefined();
    expect(handBackOf(withId(message({ ...ours, [HEADERS.merchantId]: 7 })), EVENTS)).toBeUndefined();
  });
});
