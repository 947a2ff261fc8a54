import type { ConsumeMessage } from 'amqplib';
import { dueAtOf } from '../../../apps/dispatcher/stages/intake.js';
import { copyHeaders, HEADERS } from '../../../libs/contracts/index.js';
import { failureEntryHeaders } from '../../../libs/failed/index.js';

const EVENTS = 'webhooks.events';

function message(headers: Record<string, unknown>, exchange = ''): ConsumeMessage {
  return { content: Buffer.from('{}'), fields: { exchange }, properties: { headers } } as unknown as ConsumeMessage;
}

describe('the due time a late retry is claimed by', () => {
  it('is the x-due-at of a message back from a retry tier', () => {
    expect(dueAtOf(message({ [HEADERS.dueAt]: 1_700_000_000_000 }), EVENTS)).toBe(1_700_000_000_000);
  });

  it("is none on what upstream published, on a copy the safety net republished, and on a due time that is not a time", () => {
    expect(dueAtOf(message({ [HEADERS.dueAt]: 1_700_000_000_000 }, EVENTS), EVENTS)).toBeUndefined();
    expect(dueAtOf(message({ [HEADERS.dueAt]: 1_700_000_000_000, [HEADERS.rescuedAt]: '2026-01-01T00:00:00.000Z' }), EVENTS)).toBeUndefined();
    expect(dueAtOf(message({ [HEADERS.dueAt]: 'soon' }), EVENTS)).toBeUndefined();
    expect(dueAtOf(message({}), EVENTS)).toBeUndefined();
  });
});

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
