import type { Delivery } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';
import { decodeRecords, type DeliveryRecord } from '../delivery-log/index.js';
import type { Logger } from '../logger/index.js';
import { INDEX_FROM_LOG } from '../failed/store.js';
import { writeApart } from '../runtime/apart.js';
import { fingerprintOf } from '../streams/index.js';
import type { Queryable, Session } from './database.js';
import { ensurePartitionsFor, forgetPartitions, prepareRows, type Quarantined, quarantine, storeBatch } from './materialise.js';
import { isRefusal, isTimeout } from './refusals.js';
import { SEQ_PER_OFFSET } from './schema.js';

export interface Pending {
  offset: number;
  delivery: Delivery;
  bytes: number;
  acked?: boolean;
}

/** Acks once (a second ack of a tag closes the channel), and only on the channel it came on. */
export function settle(item: Pending): void {
  if (item.acked) return;
  item.acked = true;
  if (item.delivery.live) item.delivery.ack();
}

/** A batch of the recorder's read-ahead, decoded and serialised for one statement. */
export interface Prepared {
  items: Pending[];
  records: DeliveryRecord[];
  /** Each record's feed position past the stream's seq_base: offset × SEQ_PER_OFFSET + its place. */
  positions: number[];
  /** Each record's stream offset and place in its message. */
  places: Array<[number, number]>;
  /** Entries that are not records (BatchWriter logs each as it sets it aside). */
  refused: Quarantined[];
  nextOffset: number;
  /** The append time of the last of this recorder's checkpoints in the batch. */
  caughtUpAt: Date | null;
  /** The fingerprint of the batch's last entry, stored with the offset past it. */
  lastEntry: string;
}

/**
 * The next batch: the read-ahead past `after` (the last offset stored or already prepared), bounded,
 * with this leader's `checkpoints` (id → append time).
 */
export function prepareBatch(
  buffer: readonly Pending[],
  after: number,
  limits: { messages: number; bytes: number },
  checkpoints: Map<string, number>,
): Prepared | undefined {
  const items: Pending[] = [];
  let bytes = 0;
  for (const p of buffer) {
    if (p.offset <= after) continue;
    if (items.length >= limits.messages || (items.length > 0 && bytes + p.bytes > limits.bytes)) break;
    items.push(p);
    bytes += p.bytes;
  }
  if (items.length === 0) return undefined;
  const batch: Prepared = {
    items,
    records: [],
    positions: [],
    places: [],
    refused: [],
    nextOffset: items.at(-1)!.offset + 1,
    caughtUpAt: null,
    lastEntry: fingerprintOf(items.at(-1)!.delivery.message),
  };
  for (const item of items) {
    const headers = item.delivery.message.properties.headers;
    // A recorder's, to learn where the stream ends: no records, but its offset is stored past it.
    if (headers?.[HEADERS.entryType] === ENTRY_TYPES.checkpoint) {
      const appendedAt = checkpoints.get(String(headers[HEADERS.checkpointId]));
      if (appendedAt !== undefined) {
        checkpoints.delete(String(headers[HEADERS.checkpointId]));
        batch.caughtUpAt = new Date(Math.max(appendedAt, batch.caughtUpAt?.getTime() ?? 0));
      }
      continue;
    }
    const decoded = decodeRecords(item.delivery.message.content);
    for (const refused of decoded.refused) batch.refused.push({ offset: item.offset, ...refused });
    for (let i = 0; i < decoded.records.length; i++) {
      const place = decoded.positions[i]!;
      if (place >= SEQ_PER_OFFSET) {
        // Its feed position would be another message's: a writer of ours never puts this many in one.
        batch.refused.push({ offset: item.offset, position: place, error: `more than ${SEQ_PER_OFFSET} records in one stream message`, content: JSON.stringify(decoded.records[i]) });
        continue;
      }
      batch.records.push(decoded.records[i]!);
      batch.positions.push(item.offset * SEQ_PER_OFFSET + place);
      batch.places.push([item.offset, place]);
    }
  }
  return batch;
}

/** Stores the recorder's batches, each with its offset; what PostgreSQL refuses for its data is set aside in delivery_log_quarantine. */
export class BatchWriter {
  /** Statement timeouts in a row of the single record at this place ("offset:position"). */
  private timeouts = { place: '', count: 0 };

  constructor(
    private readonly stream: string,
    private readonly logger: Logger,
    private readonly state: { rejected: number; quarantined: number },
  ) {}

  async store(session: Session, batch: Prepared): Promise<void> {
    const storedUpTo = batch.items[0]!.offset;
    for (const entry of batch.refused) await this.setAside(session, entry);
    let refusal: { err: unknown } | undefined;
    try {
      await storeIndexed(session, batch.records, (db) => storeBatch(db, this.stream, prepareRows(batch.records, batch.positions), batch.nextOffset, batch.caughtUpAt, batch.lastEntry));
      return;
    } catch (err) {
      // A batch of one record is that record alone, its timeouts counted.
      if (!this.refuses(batch, [...batch.records.keys()], err)) throw err;
      // Retention may have dropped a day partition this session knew of: made again where needed.
      forgetPartitions(session);
      this.logger.warn('delivery records refused by the database; looking for the ones it refuses', { offset: storedUpTo, records: batch.records.length, error: (err as Error).message });
      // Refused for its data, the whole batch is tried once more (its partitions made again, that may
      // pass); a statement timeout, which that cannot cure, goes straight to the halves.
      if (isTimeout(err)) refusal = { err };
    }
    await this.storeApart(session, batch, storedUpTo, refusal);
    await storeBatch(session, this.stream, prepareRows([]), batch.nextOffset, batch.caughtUpAt, batch.lastEntry);
  }

  /**
   * The records of a refused batch, halved until the refused ones stand alone (writeApart). Halves do
   * not move the stored offset, and storing a record twice changes nothing, so a crash in the middle
   * starts the batch again harmlessly. `refusal`: writeApart's refusedWith.
   */
  private async storeApart(session: Session, batch: Prepared, storedUpTo: number, refusal?: { err: unknown }): Promise<void> {
    const store = (at: number[]) => {
      const records = at.map((i) => batch.records[i]!);
      return storeIndexed(session, records, (db) => storeBatch(db, this.stream, prepareRows(records, at.map((i) => batch.positions[i]!)), storedUpTo, null));
    };
    await writeApart(batch.records.map((_, i) => i), store, (err, at) => this.refuses(batch, at, err), {
      written: () => {},
      refused: async (i, err) => {
        const [offset, position] = batch.places[i]!;
        const { merchantId, webhookId } = batch.records[i]!;
        await this.setAside(session, { offset, position, merchantId, webhookId, error: (err as Error).message, content: JSON.stringify(batch.records[i]) });
        this.state.quarantined++;
      },
    }, refusal);
  }

  /** Refused for what these records carry: a timeout of one alone only at its third in a row. */
  private refuses(batch: Prepared, at: readonly number[], err: unknown): boolean {
    return at.length === 1 && isTimeout(err) ? this.timedOutEnough(batch.places[at[0]!]!.join(':')) : isRefusal(err, at.length);
  }

  private timedOutEnough(place: string): boolean {
    this.timeouts = this.timeouts.place === place ? { place, count: this.timeouts.count + 1 } : { place, count: 1 };
    return this.timeouts.count >= 3;
  }

  private async setAside(session: Session, entry: Quarantined): Promise<void> {
    await quarantine(session, this.stream, entry);
    if (entry.webhookId === undefined) this.state.rejected++;
    this.logger.error('delivery record set aside in delivery_log_quarantine', {
      stream: this.stream,
      offset: entry.offset,
      position: entry.position,
      merchantId: entry.merchantId,
      webhookId: entry.webhookId,
      error: entry.error.slice(0, 500),
    });
  }
}

/** Stores a batch (its days' partitions made first) and indexes its failures in one transaction. */
async function storeIndexed(session: Session, records: readonly DeliveryRecord[], store: (db: Queryable) => Promise<void>): Promise<void> {
  await ensurePartitionsFor(session, records);
  const failed = records.filter((r) => r.outcome === 'failed');
  if (failed.length === 0) return store(session);
  await session.transaction(async (tx) => {
    await store(tx);
    await tx.query(INDEX_FROM_LOG, [failed.map((r) => r.merchantId), failed.map((r) => r.webhookId), failed.map((r) => r.at), failed.map((r) => r.reason ?? null), failed.map((r) => r.endpointId ?? ''), failed.map((r) => r.resend ?? 0)]);
  });
}
