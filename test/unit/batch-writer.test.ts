import { describe, expect, it } from '@jest/globals';
import type { DeliveryRecord } from '../../libs/delivery-log/index.js';
import type { Prepared } from '../../libs/delivery-store/batch-writer.js';
import { BatchWriter } from '../../libs/delivery-store/batch-writer.js';
import type { Queryable, Session } from '../../libs/delivery-store/database.js';
import { silentLogger } from '../../libs/logger/index.js';

const timeout = Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
const noPartition = Object.assign(new Error('no partition of relation "delivery_records" found for row'), { code: '23514' });

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

type FakeSession = Session & { stored: string[]; quarantined: unknown[][]; statements: string[][]; timeouts: number; dropPartitions(): void };

/**
 * A session whose every statement that carries `slow` runs past its statement timeout (each counted:
 * 30 s apiece for the recorder); it tells what was stored and set aside, and the records of each
 * statement that carried some. `dropPartitions()` is
 * retention dropping the day partitions made so far: a record's statement is then refused as
 * PostgreSQL refuses a row no partition holds (23514), until its day's partition is made again.
 */
function session(slow: string): FakeSession {
  const stored: string[] = [];
  const quarantined: unknown[][] = [];
  let partitioned = false;
  const query = async (text: string, params: unknown[] = []) => {
    const ids = ['wh_0', 'wh_1', 'wh_slow', 'wh_3'].filter((id) => params.some((p) => typeof p === 'string' && p.includes(id)));
    if (text.includes('PARTITION OF delivery_records')) partitioned = true;
    else if (text.includes('delivery_log_quarantine')) quarantined.push(params);
    else if (ids.length > 0) {
      fake.statements.push(ids);
      if (ids.includes(slow)) {
        fake.timeouts++;
        throw timeout;
      }
      if (!partitioned) throw noPartition;
      stored.push(...ids);
    }
    return { rows: [] };
  };
  const db = { query: query as Queryable['query'] };
  const fake: FakeSession = { ...db, transaction: (work) => work(db), exec: async () => {}, lost: new Promise(() => {}), close: async () => {}, stored, quarantined, statements: [], timeouts: 0, dropPartitions: () => void (partitioned = false) };
  return fake;
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
    // Each try: the whole batch, its half [wh_slow, wh_3], wh_slow alone. A timeout is no refusal a
    // second statement of the same records cures: the whole batch again would cost one more timeout
    // (30 s) a try before the halving starts.
    expect(db.timeouts).toBe(9);
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
    // Set aside at its third timeout, as a half's record is, not after a fourth statement.
    expect(db.timeouts).toBe(3);
  });
});

describe("the recorder's batch writer when retention dropped a day partition it knew of (BatchWriter)", () => {
  it('makes the partition again and stores the whole batch in its second statement, nothing set aside', async () => {
    const state = { rejected: 0, quarantined: 0 };
    const writer = new BatchWriter('s', silentLogger(), state);
    const db = session('none');
    await writer.store(db, batch(['wh_0']));
    db.dropPartitions();
    db.statements.length = 0;
    await writer.store(db, batch(['wh_0', 'wh_1', 'wh_3']));
    expect(db.statements).toEqual([['wh_0', 'wh_1', 'wh_3'], ['wh_0', 'wh_1', 'wh_3']]);
    expect(db.quarantined).toEqual([]);
    expect(state).toEqual({ rejected: 0, quarantined: 0 });
  });

  it('makes it again for a record alone in its batch too: refused once for the partition, it is stored, not set aside', async () => {
    const state = { rejected: 0, quarantined: 0 };
    const writer = new BatchWriter('s', silentLogger(), state);
    const db = session('none');
    await writer.store(db, batch(['wh_0']));
    db.dropPartitions();
    db.stored.length = 0;
    await writer.store(db, batch(['wh_1']));
    expect(db.stored).toEqual(['wh_1']);
    expect(db.quarantined).toEqual([]);
    expect(state).toEqual({ rejected: 0, quarantined: 0 });
  });
});
