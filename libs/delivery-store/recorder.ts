import type { BrokerConnection, Consumer, Delivery } from '../broker/index.js';
import { decodeRecords, type DeliveryRecord } from '../delivery-log/index.js';
import type { Logger } from '../logger/index.js';
import { randomUUID } from 'node:crypto';
import { HEADERS } from '../contracts/index.js';
import { CHECKPOINT, landCheckpoint, offsetOf } from '../streams/index.js';
import { declareQueueSpec, deliveriesSpec, type Replication, topologyNames } from '../topology/index.js';
import type { Database, Session } from './database.js';
import { ensurePartitionsFor, markCaughtUp, NO_ROWS, type PreparedRows, prepareRows, storeBatch, storedOffset } from './materialise.js';
import { dropExpiredPartitions, ensureSchema } from './schema.js';

export interface RecorderOptions {
  prefix: string;
  replication?: Replication;
  /** DELIVERY_LOG_RETENTION: day partitions older than this are dropped. */
  retentionMs: number;
  /** Stream messages per transaction at most (each holds up to 200 records). */
  maxMessages?: number;
  /** A batch is written this long after its first message at the latest. */
  flushAfterMs?: number;
  /** How often a standby tries to take the lock, and a leader without a database tries again. */
  retryMs?: number;
  prefetch?: number;
}

/** What a recorder reports, for metrics and tests. */
export interface RecorderState {
  leading: boolean;
  /** Stream messages read and not yet stored. */
  pending: number;
  /** When the log last held everything read (ms since epoch), as far as this recorder knows. */
  caughtUpAt?: number;
  recordsStored: number;
  rejected: number;
}

interface Pending {
  offset: number;
  delivery: Delivery;
}

/** A batch decoded and serialised, ready for one statement. */
interface Prepared {
  items: Pending[];
  records: DeliveryRecord[];
  rows: PreparedRows;
  nextOffset: number;
}

/** SQLSTATE class 22 (data exception): this batch's data, not the database, is the problem. */
const isDataError = (err: unknown) => String((err as { code?: string })?.code ?? '').startsWith('22');

/**
 * Materialises `<prefix>.deliveries` into PostgreSQL. One recorder writes at a time: the leader
 * holds a session-level advisory lock, and the others wait and retry (replicas stand by). The
 * leader reads the stream from the offset stored in PostgreSQL and stores each batch and the next
 * offset in one transaction, so after a crash, a lost connection or a PostgreSQL restart it
 * resumes exactly after what was stored: nothing is missed or stored twice. Any database error
 * gives the lead up; it is taken again from the stored offset.
 */
export class DeliveryLogRecorder {
  private readonly stream: string;
  private readonly lockName: string;
  private session?: Session;
  private consumer?: Consumer;
  private buffer: Pending[] = [];
  /** The next offset to store: everything before it is in PostgreSQL. */
  private next?: number;
  private flushTimer?: NodeJS.Timeout;
  private retryTimer?: NodeJS.Timeout;
  private idleTimer?: NodeJS.Timeout;
  private writing?: Promise<void>;
  private stopped = false;
  private stopping?: Promise<void>;
  private generation = 0;
  /** The last offset taken into a prepared batch. */
  private preparedUpTo?: number;
  readonly state: RecorderState = { leading: false, pending: 0, recordsStored: 0, rejected: 0 };
  private readonly onDisconnected = () => {
    // What the lost channel delivered will come again from the stored offset.
    this.buffer = [];
    this.state.pending = 0;
  };
  /** A reconnect may follow an operator deleting the stream: lead again, which looks at where it ends. */
  private readonly onConnected = () => void this.checkStream();

  constructor(
    private readonly broker: BrokerConnection,
    private readonly db: Database,
    private readonly logger: Logger,
    private readonly options: RecorderOptions,
  ) {
    this.stream = topologyNames(options.prefix).deliveries;
    this.lockName = `webhooks-delivery-recorder:${this.stream}`;
  }

  async start(): Promise<void> {
    await declareQueueSpec(() => this.broker.createChannel(), deliveriesSpec(this.options.prefix, this.options.replication));
    this.broker.on('disconnected', this.onDisconnected);
    this.broker.on('connected', this.onConnected);
    void this.tryToLead();
  }

  /** Stores what was read, then lets the lock go (a standby takes over). Safe twice. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.stopped = true;
      clearTimeout(this.retryTimer);
      clearTimeout(this.idleTimer);
      this.broker.off('disconnected', this.onDisconnected);
      this.broker.off('connected', this.onConnected);
      await this.consumer?.cancel();
      clearTimeout(this.flushTimer);
      await this.writing?.catch(() => {});
      if (this.session && this.buffer.length > 0) await this.write().catch(() => {});
      await this.resign();
    })();
    return this.stopping;
  }

  private schedule(fn: () => void, ms: number): void {
    if (this.stopped) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(fn, ms);
  }

  private async tryToLead(): Promise<void> {
    if (this.stopped || this.session) return;
    const retryMs = this.options.retryMs ?? 1_000;
    let session: Session | undefined;
    try {
      session = await this.db.session();
      const { rows } = await session.query<{ locked: boolean }>('SELECT pg_try_advisory_lock(hashtext($1)) AS locked', [this.lockName]);
      if (!rows[0]?.locked) {
        await session.close();
        this.schedule(() => void this.tryToLead(), retryMs);
        return;
      }
      await ensureSchema(session);
      // Safe here: a batch and its offset commit together, so a commit lost in a PostgreSQL crash
      // loses both, and the recorder reads those records again from the stream.
      await session.query('SET synchronous_commit = off');
      this.next = await storedOffset(session, this.stream);
      if (this.next !== undefined && (await this.streamEnd()) < this.next) {
        // Deleted and declared again (streams cannot be purged): its offsets started over, and
        // resuming at the stored one would wait past its end for ever.
        this.logger.warn('stream deleted and declared again; reading it from its first entry', { stream: this.stream, resumedAt: this.next });
        this.next = undefined;
      }
      await this.expire(session);
    } catch (err) {
      this.logger.warn('delivery recorder cannot take the lead yet (database or stream unreachable); retrying', { error: (err as Error).message });
      await session?.close();
      this.schedule(() => void this.tryToLead(), retryMs);
      return;
    }
    if (this.stopped) {
      await session.close();
      return;
    }
    this.session = session;
    const generation = ++this.generation;
    this.state.leading = true;
    void session.lost.then((err) => {
      if (this.generation === generation) void this.giveUp(err);
    });
    this.logger.info('delivery recorder leading', { stream: this.stream, from: this.next ?? 'first' });
    this.consumer = await this.broker.consume(this.stream, {
      prefetch: this.options.prefetch ?? 2_000,
      arguments: () => ({ 'x-stream-offset': this.next ?? 'first' }),
      onMessage: (delivery) => this.receive(delivery, generation),
    });
    this.idle();
  }

  /** The offset the stream is at now (a checkpoint appended and read back where it landed). */
  private streamEnd(): Promise<number> {
    return landCheckpoint(this.broker, this.stream, randomUUID(), 10_000);
  }

  /** After a reconnect while leading: a stream that ends before the stored offset is a new one. */
  private async checkStream(): Promise<void> {
    if (!this.session || this.next === undefined || this.stopped) return;
    try {
      if ((await this.streamEnd()) >= (this.next ?? 0) || !this.session) return;
    } catch {
      return; // the broker is not taking appends yet; the next reconnect looks again
    }
    await this.resign();
    void this.tryToLead();
  }

  private receive(delivery: Delivery, generation: number): void {
    const offset = offsetOf(delivery.message.properties.headers);
    // A stream hands out whole chunks: entries before the requested offset are already stored.
    if (generation !== this.generation || offset === undefined || (this.next !== undefined && offset < this.next)) {
      delivery.ack();
      return;
    }
    const last = this.buffer.at(-1);
    if (last && offset <= last.offset) {
      delivery.ack();
      return;
    }
    this.buffer.push({ offset, delivery });
    this.state.pending = this.buffer.length;
    if (this.buffer.length >= (this.options.maxMessages ?? 100)) this.kick();
    else this.flushTimer ??= setTimeout(() => this.kick(), this.options.flushAfterMs ?? 20);
  }

  /** One write at a time, in stream order. */
  private kick(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.writing || !this.session) return;
    this.writing = this.write()
      .catch((err) => this.giveUp(err as Error))
      .finally(() => {
        this.writing = undefined;
        if (this.buffer.length > 0 && this.session) this.kick();
      });
  }

  /** The next batch from the buffer: decoded and serialised (CPU work done while PostgreSQL stores the previous one). */
  private prepare(): Prepared | undefined {
    const after = Math.max(this.preparedUpTo ?? -1, (this.next ?? 0) - 1);
    const items = this.buffer.filter((p) => p.offset > after).slice(0, this.options.maxMessages ?? 100);
    if (items.length === 0) return undefined;
    const records: DeliveryRecord[] = [];
    for (const item of items) {
      // Appended by a recorder to learn where the stream ends: no records, but its offset is stored past it.
      if (item.delivery.message.properties.headers?.[HEADERS.entryType] === CHECKPOINT) continue;
      const decoded = decodeRecords(item.delivery.message.content);
      records.push(...decoded.records);
      if (decoded.rejected > 0) {
        this.state.rejected += decoded.rejected;
        this.logger.warn('delivery records rejected', { stream: this.stream, offset: item.offset, rejected: decoded.rejected, reason: decoded.reason });
      }
    }
    this.preparedUpTo = items.at(-1)!.offset;
    return { items, records, rows: prepareRows(records), nextOffset: items.at(-1)!.offset + 1 };
  }

  /**
   * Stores batches one after another in stream order, each in one statement with its offset; the
   * next batch is prepared while the current one is in PostgreSQL.
   */
  private async write(): Promise<void> {
    let current = this.prepare();
    while (current) {
      const session = this.session;
      if (!session) return;
      await ensurePartitionsFor(session, current.records, session);
      const caughtUp = this.buffer.every((p) => p.offset < current!.nextOffset);
      const storing = this.store(session, current, caughtUp);
      // Let the statement go out, then prepare the next batch meanwhile.
      await new Promise((resolve) => setImmediate(resolve));
      const next = this.prepare();
      await storing;
      this.next = current.nextOffset;
      // The buffer may have been cleared by a disconnect meanwhile: drop only what was stored.
      this.buffer = this.buffer.filter((p) => p.offset >= this.next!);
      this.state.pending = this.buffer.length;
      this.state.recordsStored += current.records.length;
      if (caughtUp && this.buffer.length === 0) this.state.caughtUpAt = Date.now();
      for (const item of current.items) if (item.delivery.live) item.delivery.ack();
      current = next;
    }
  }

  /**
   * A batch PostgreSQL refuses for its data (a value it cannot hold) is stored message by message,
   * and a message refused alone is skipped with its offset (counted and logged): one bad record
   * must not stop the log.
   */
  private async store(session: Session, batch: Prepared, caughtUp: boolean): Promise<void> {
    try {
      await storeBatch(session, this.stream, batch.rows, batch.nextOffset, caughtUp);
      return;
    } catch (err) {
      if (!isDataError(err)) throw err;
      this.logger.warn('delivery records refused by the database; storing them one message at a time', { error: (err as Error).message });
    }
    for (const item of batch.items) {
      const { records } = decodeRecords(item.delivery.message.content);
      try {
        await storeBatch(session, this.stream, prepareRows(records), item.offset + 1, false);
      } catch (err) {
        if (!isDataError(err)) throw err;
        this.state.rejected += records.length;
        this.logger.error('delivery records skipped: the database refuses their data', { offset: item.offset, records: records.length, error: (err as Error).message });
        await storeBatch(session, this.stream, NO_ROWS, item.offset + 1, false);
      }
    }
  }

  /** While nothing arrives the log stays current: say so every few seconds, and apply retention hourly. */
  private idle(): void {
    let sinceExpiry = 0;
    const tick = async () => {
      const session = this.session;
      if (this.stopped || !session) return;
      try {
        if (this.buffer.length === 0 && !this.writing) {
          await markCaughtUp(session, this.stream);
          this.state.caughtUpAt = Date.now();
        }
        if ((sinceExpiry += 5_000) >= 3_600_000) {
          sinceExpiry = 0;
          await this.expire(session);
        }
      } catch (err) {
        await this.giveUp(err as Error);
        return;
      }
      this.idleTimer = setTimeout(() => void tick(), 5_000);
    };
    this.idleTimer = setTimeout(() => void tick(), 5_000);
  }

  private async expire(session: Session): Promise<void> {
    const dropped = await dropExpiredPartitions(session, this.options.retentionMs);
    if (dropped.length > 0) this.logger.info('delivery log partitions dropped', { dropped });
  }

  /** The database went away under the leader: stop reading, forget what was read, take the lead again later. */
  private async giveUp(err: Error): Promise<void> {
    if (!this.session) return;
    this.logger.warn('delivery recorder lost its database session; will resume from the stored offset', { error: err.message });
    await this.resign();
    this.schedule(() => void this.tryToLead(), this.options.retryMs ?? 1_000);
  }

  private async resign(): Promise<void> {
    this.generation++;
    this.preparedUpTo = undefined;
    clearTimeout(this.idleTimer);
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const consumer = this.consumer;
    const session = this.session;
    this.consumer = undefined;
    this.session = undefined;
    this.state.leading = false;
    for (const item of this.buffer) if (item.delivery.live) item.delivery.ack();
    this.buffer = [];
    this.state.pending = 0;
    await consumer?.cancel();
    // Closing the session releases the advisory lock.
    await session?.close();
  }
}
