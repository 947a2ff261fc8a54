import type { ConsumeMessage } from 'amqplib';
import { waitOf } from '../../../apps/dispatcher/stages/intake.js';
import { copyHeaders, HEADERS } from '../../../libs/contracts/index.js';
import { failureEntryHeaders, failureIdOf } from '../../../libs/failed/index.js';

const EVENTS = 'webhooks.events';

function message(headers: Record<string, unknown>, exchange = ''): ConsumeMessage {
  return { content: Buffer.from('{}'), fields: { exchange }, properties: { headers } } as unknown as ConsumeMessage;
}

describe('the wait a resent copy ends', () => {
  it('is keyed by the failure entry it was resent from, not by that entry offset, which a deleted stream reuses', () => {
    const wait = waitOf(message({ [HEADERS.resentFromId]: 'f-1', [HEADERS.resentFromOffset]: 2, [HEADERS.copyId]: 'c-1' }), EVENTS);
    expect(wait).toEqual({ key: 'resend:f-1', copyId: 'c-1' });
  });

  it('of two entries at the same offset of two incarnations of the stream, gets two keys', () => {
    const before = waitOf(message({ [HEADERS.resentFromId]: 'f-old', [HEADERS.resentFromOffset]: 2 }), EVENTS);
    const after = waitOf(message({ [HEADERS.resentFromId]: 'f-new', [HEADERS.resentFromOffset]: 2 }), EVENTS);
    expect(before!.key).not.toBe(after!.key);
  });

  it('keeps the offset key on a copy resent before failure ids existed (in flight across the upgrade)', () => {
    expect(waitOf(message({ [HEADERS.resentFromOffset]: 2, [HEADERS.copyId]: 'c-1' }), EVENTS)).toEqual({ key: 'resend:2', copyId: 'c-1' });
  });

  it('is the schedule once the copy waited in a retry tier, and none on what upstream published', () => {
    expect(waitOf(message({ [HEADERS.scheduleId]: 's-1', [HEADERS.resentFromId]: 'f-1' }), EVENTS)!.key).toBe('s-1');
    expect(waitOf(message({ [HEADERS.resentFromId]: 'f-1' }, EVENTS), EVENTS)).toBeUndefined();
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
  });

  it('is read from the entry, or for an entry written before ids, made of its failure time and offset', () => {
    expect(failureIdOf({ properties: { headers: { [HEADERS.failureId]: 'f-1', [HEADERS.failedAt]: 't' } } as never }, 2)).toBe('f-1');
    expect(failureIdOf({ properties: { headers: { [HEADERS.failedAt]: '2026-11-25T10:00:00.000Z' } } as never }, 2)).toBe('2026-11-25T10:00:00.000Z#2');
    expect(failureIdOf({ properties: { headers: {} } as never }, 2)).toBeUndefined();
  });
});
