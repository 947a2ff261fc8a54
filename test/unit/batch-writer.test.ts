import { describe, expect, it } from '@jest/globals';
import type { DeliveryRecord } from '../../libs/delivery-log/index.js';
import type { Prepared } from '../../libs/delivery-store/batches.js';
import { BatchWriter } from '../../libs/delivery-store/batch-writer.js';
import type { Queryable, Session } from '../../libs/delivery-store/database.js';
import { silentLogger } from '../../libs/logger/index.js';

const timeout = Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });

function record(webhookId: string): DeliveryRecord {
  const at = new Date().toISOString();
  return { id: `id-${webhookId}`, at, webhookId, merchantId: 'm_slow', event: 'payout', references: [`po-${webhookId}`], payload: '{}', firstSeenAt: at, outcome: 'delivered', attemptNumber: 1 } as DeliveryRecord;
}

/** A batch of one message (offset 7) of these records. */
function batch(ids: string[]): Prepared {
  return {
    items: [{ offset: 7 } as Prepared['items'][number]],
    records: ids.map(record),
    positions: ids.map((_, i) => 7 * 1000 + i),
    places: ids.map((_, i) => [7, i] as [number, number]),
    refused: [],
    nextOffset: 8,
    caughtUpAt: null,
    lastEntry: 'fp',
  };
}

/** A session whose every statement that carries `slow` runs past its statement timeout; it tells what was stored and set aside. */
function session(slow: string): Session & { stored: string[]; quarantined: unknown[][] } {
  const stored: string[] = [];
  const quarantined: unknown[][] = [];
  const query = async (text: string, params: unknown[] = []) => {
    if (text.includes('delivery_log_quarantine')) quarantined.push(params);
    else if (params.some((p) => typeof p === 'string' && p.includes(slow))) throw timeout;
    else if (params.length > 0) stored.push(...['wh_0', 'wh_1', 'wh_slow', 'wh_3'].filter((id) => params.some((p) => typeof p === 'string' && p.includes(id))));
    return { rows: [] };
  };
  const db = { query: query as Queryable['query'] };
  return { ...db, transaction: (work) => work(db), exec: async () => {}, lost: new Promise(() => {}), close: async () => {}, stored, quarantined };
}

describe("the recorder's batch writer under a statement timeout (BatchWriter)", () => {
  it('sets aside a record alone whose statement times out three times in a row, storing every other record of its batch', async () => {
    const state = { rejected: 0, quarantined: 0 };
    const writer = new BatchWriter('s', silentLogger(), state);
    const db = session('wh_slow');
    const prepared = batch(['wh_0', 'wh_1', 'wh_slow', 'wh_3']);
    // A database merely slow for a moment is waited for: the first two timeouts of the record alone are the caller's to try again.
    await expect(writer.store(db, prepared)).rejects.toBe(timeout);
    await expect(writer.store(db, prepared)).rejects.toBe(timeout);
    expect(db.quarantined).toEqual([]);
    await writer.store(db, prepared);
    expect(db.quarantined.map((params) => params.slice(1, 5))).toEqual([[7, 2, 'm_slow', 'wh_slow']]);
    expect(state).toEqual({ rejected: 0, quarantined: 1 });
    expect(new Set(db.stored)).toEqual(new Set(['wh_0', 'wh_1', 'wh_3']));
  });

  it('sets aside a record alone in its batch (the stream\'s end, no other traffic) by the same rule, at its third try', async () => {
    const state = { rejected: 0, quarantined: 0 };
    const writer = new BatchWriter('s', silentLogger(), state);
    const db = session('wh_slow');
    const prepared = batch(['wh_slow']);
    await expect(writer.store(db, prepared)).rejects.toBe(timeout);
    await expect(writer.store(db, prepared)).rejects.toBe(timeout);
    expect(db.quarantined).toEqual([]);
    await writer.store(db, prepared);
    expect(db.quarantined.map((params) => params.slice(1, 5))).toEqual([[7, 0, 'm_slow', 'wh_slow']]);
    expect(state).toEqual({ rejected: 0, quarantined: 1 });
  });
});
