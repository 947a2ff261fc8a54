import { foldDeliveries } from '../../libs/delivery-store/views.js';
import type { WebhookDetail } from '../../libs/delivery-store/views.js';

function delivery(endpointId: string, over: Partial<WebhookDetail>): WebhookDetail {
  const base = {
    endpointId,
    status: 'delivered' as const,
    attempts: 1,
    firstAttemptAt: '2026-01-01T12:00:00.000Z',
    lastAttemptAt: '2026-01-01T12:00:00.000Z',
    lastHttpStatus: 204,
    lastError: null,
    nextAttemptAt: null,
    ...over,
  };
  return {
    ...base,
    webhookId: 'evt_1',
    event: 'charge.completed',
    references: ['ref_1'],
    firstSeenAt: '2026-01-01T11:59:59.000Z',
    payload: {},
    deliveries: [base],
    records: [],
    duplicates: 0,
    lastDuplicateAt: null,
  };
}

describe("a fanned-out webhook's folded detail", () => {
  // ep_a's dispatcher runs 30 s ahead of ep_b's: by the clocks ep_a's attempt is the last, though
  // ep_b's record came after it in the deliveries stream (the one order both share).
  const a = delivery('ep_a', { lastAttemptAt: '2026-01-01T12:00:40.000Z', lastHttpStatus: 204, status: 'delivered' });
  const b = delivery('ep_b', { lastAttemptAt: '2026-01-01T12:00:20.000Z', lastHttpStatus: 503, lastError: 'HTTP 503', status: 'retrying' });

  it("takes the last status and error from the delivery whose last attempt is latest in the stream, not by the hosts' clocks", () => {
    const folded = foldDeliveries([a, b], [1_000, 1_007]);
    expect(folded.lastHttpStatus).toBe(503);
    expect(folded.lastError).toBe('HTTP 503');
    expect(folded.lastAttemptAt).toBe('2026-01-01T12:00:20.000Z');
    expect(folded.status).toBe('retrying');
  });

  it('falls back to the attempt times when a delivery has no position (stored before the log kept one)', () => {
    expect(foldDeliveries([a, b], [1_000, null]).lastHttpStatus).toBe(204);
    expect(foldDeliveries([a, b]).lastHttpStatus).toBe(204);
  });

  it('ignores a delivery never attempted (no position, no attempt) when the others have positions', () => {
    const skipped = delivery('ep_c', { attempts: 0, firstAttemptAt: null, lastAttemptAt: null, lastHttpStatus: null, status: 'skipped' });
    expect(foldDeliveries([a, b, skipped], [1_000, 1_007, null]).lastHttpStatus).toBe(503);
  });
});
