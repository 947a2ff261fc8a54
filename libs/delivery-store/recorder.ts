import { randomUUID } from 'node:crypto';
import type { BrokerConnection, Consumer, Delivery } from '../broker/index.js';
import type { Logger } from '../logger/index.js';
import { appendCheckpoint, fingerprintAt, landCheckpoint, offsetOf } from '../streams/index.js';
import { declareQueueSpec, deliveriesSpec, type Replication, topologyNames } from '../topology/index.js';
import { BatchWriter, type Pending, type Prepared, prepareBatch, settle } from './batch-writer.js';
import type { Database, Session } from './database.js';
import { restartStream, storedPlace } from './materialise.js';
import { isLockRefused, isTimeout } from './refusals.js';
import { dropExpiredPartitions, ensureDaysAhead, withLockWait } from './schema.js';
import { Periodic } from '../runtime/periodic.js';
import { StartOnce } from '../runtime/start-once.js';
import { ATTR, inSpan, SpanKind } from '../tracing/index.js';

interface RecorderOptions {
  prefix: string;
  replication?: Replication;
  /** DELIVERY_LOG_RETENTION. */
  retentionMs: number;
  /** A transaction's stream messages' bytes at most (at least one message). */
  maxBatchBytes?: number;
  /** How often a standby tries to take the lock, and a leader without a database tries again. */
  retryMs?: number;
  /** The bytes read and not stored at most: past this, reading stops until half is stored. */
  bufferBytes?: number;
  checkpointEveryMs?: number;
  /** A checkpoint not read back within this, while nothing else arrives, means the consumer stopped. */
  livenessDeadlineMs?: number;
}

export const BUFFER_BYTES = 16 * 1024 * 1024;
export const BATCH_BYTES = 4 * 1024 * 1024;
/** Stream messages per transaction, and handed out before an ack. */
const BATCH_MESSAGES = 100;
/** How long the upkeep waits for delivery_records' lock: every read queues behind the wait. */
export const UPKEEP_LOCK_WAIT = '1s';

/**
 * Materialises `<prefix>.deliveries` into PostgreSQL. The leader holds a session-level advisory
 * lock (replicas stand by) and stores each batch with the next offset in one statement, so it
 * resumes exactly after what was stored. What PostgreSQL refuses for the data itself is set aside
 * (BatchWriter); anything else gives the lead up, taken again from the stored offset.
 *
 * The leader appends a checkpoint every few seconds; caught_up_at moves to its append time once it
 * is stored past. A consumer that stopped receiving (RabbitMQ 3.10 can leave one silent on an open
 * channel) is subscribed again when its checkpoint does not come back.
 */
export class DeliveryLogRecorder {
  private readonly stream: string;
  private session?: Session;
  private consumer?: Consumer;
  private buffer: Pending[] = [];
  /** Everything before it is in PostgreSQL. */
  private next?: number;
  private flushTimer?: NodeJS.Timeout;
  private retryTimer?: NodeJS.Timeout;
  private idling?: Periodic;
  private writing?: Promise<void>;
  private stopped = false;
  private readonly starting = new StartOnce();
  private stopping?: Promise<void>;
  /** Bumped at each lead taken or given up, and at each subscription: what an earlier one hands in is ignored. */
  private generation = 0;
  private subscription = 0;
  /** Reading stopped: the buffer held more than bufferBytes. */
  private paused = false;
  private preparedUpTo?: number;
  /** The fingerprint of the entry before `next`. */
  private lastEntry?: string | null;
  /** This leader's checkpoints appended and not stored past yet: id → append time. */
  private readonly checkpoints = new Map<string, number>();
  private lastReceivedAt = Date.now();
  readonly state = {
    leading: false,
    /** Stream messages read and not yet stored, and their bytes. */
    pending: 0,
    pendingBytes: 0,
    /** When the stream last ended where the log now holds everything (ms since epoch). */
    caughtUpAt: undefined as number | undefined,
    recordsStored: 0,
    /** Set aside in delivery_log_quarantine: entries that are not records, and records PostgreSQL refused. */
    rejected: 0,
    quarantined: 0,
    /** Times the consumer was subscribed again: it stopped receiving, or reading paused for memory. */
    resubscribed: 0,
  };
  private readonly writer: BatchWriter;
  private readonly onDisconnected = () => {
    // What the lost channel delivered will come again from the stored offset.
    this.buffer = [];
    this.countBuffer();
    // A consumer closed to pause reading is not resumed by the reconnect.
    this.resumeIfDrained();
  };
  /** A reconnect may follow an operator deleting the stream. */
  private readonly onConnected = () => void this.checkStream();

  constructor(
    private readonly broker: BrokerConnection,
    private readonly db: Database,
    private readonly logger: Logger,
    private readonly options: RecorderOptions,
  ) {
    this.stream = topologyNames(options.prefix).deliveries;
    this.writer = new BatchWriter(this.stream, logger, this.state);
  }

  /** Declares the stream and tries to lead; safe twice, and a no-op once stopped. */
  start(): Promise<void> {
    return this.starting.run(async () => {
      await declareQueueSpec(() => this.broker.createChannel(), deliveriesSpec(this.options.prefix, this.options.replication));
      if (this.stopped) return;
      this.broker.on('disconnected', this.onDisconnected);
      this.broker.on('connected', this.onConnected);
      void this.tryToLead();
    });
  }

  /** Stores what was read, then lets the lock go (a standby takes over). Safe twice. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.stopped = true;
      clearTimeout(this.retryTimer);
      void this.idling?.stop();
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

  private leadLater(): void {
    if (this.stopped) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.tryToLead(), this.options.retryMs ?? 1_000);
  }

  private async tryToLead(): Promise<void> {
    if (this.stopped || this.session) return;
    let session: Session | undefined;
    try {
      session = await this.db.session();
      const { rows } = await session.query<{ locked: boolean }>('SELECT pg_try_advisory_lock(hashtext($1)) AS locked', [`webhooks-delivery-recorder:${this.stream}`]);
      if (!rows[0]?.locked) {
        await session.close();
        this.leadLater();
        return;
      }
      const place = await storedPlace(session, this.stream);
      this.next = place?.nextOffset;
      this.lastEntry = place?.lastEntry;
      if (place && (await this.isNewStream(place.nextOffset, place.lastEntry))) {
        // Deleted and declared again (streams cannot be purged): its offsets started over. Feed
        // positions move past every one given out, so that no cursor skips its webhooks.
        this.logger.warn('stream deleted and declared again; reading it from its first entry', { stream: this.stream, resumedAt: this.next });
        await restartStream(session, this.stream);
        this.next = 0;
        this.lastEntry = null;
      }
      // Safe: a batch and its offset commit together, so a crash loses both, stored again from the stream.
      await session.query('SET synchronous_commit = off');
      // A lock held elsewhere must fail as lock_not_available (retried), never as a statement
      // timeout (which may set a record aside).
      await session.query("SET lock_timeout = '10s'");
      this.state.caughtUpAt = (place?.caughtUpAt ?? new Date()).getTime();
      await this.expire(session);
    } catch (err) {
      this.logger.warn('delivery recorder cannot take the lead yet (database or stream unreachable); retrying', { error: (err as Error).message });
      await session?.close();
      this.leadLater();
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
    try {
      await this.subscribe();
    } catch (err) {
      // The connection dropped at that moment, or the stream is gone; the 'connected' event may never come.
      this.logger.warn('delivery recorder could not read the stream; letting the lead go, retrying', { error: (err as Error).message });
      if (this.generation === generation) await this.resign();
      this.leadLater();
      return;
    }
    this.idle(session);
  }

  /** Reads from just past what is buffered (or stored). */
  private async subscribe(): Promise<void> {
    const subscription = ++this.subscription;
    const generation = this.generation;
    this.lastReceivedAt = Date.now();
    const consumer = await this.broker.consume(this.stream, {
      prefetch: BATCH_MESSAGES,
      arguments: () => {
        const last = this.buffer.at(-1)?.offset ?? this.preparedUpTo;
        return { 'x-stream-offset': last === undefined ? (this.next ?? 'first') : Math.max(last + 1, this.next ?? 0) };
      },
      onMessage: (delivery) => this.receive(delivery, generation, subscription),
    });
    if (this.subscription !== subscription || this.generation !== generation) await consumer.cancel();
    else this.consumer = consumer;
  }

  private async unsubscribe(): Promise<void> {
    this.subscription++;
    const consumer = this.consumer;
    this.consumer = undefined;
    // Closed, not only cancelled: what its channel handed out is no longer live.
    await consumer?.close();
  }

  /** A stream that ends before the stored offset, or holds another entry just before it, is not the one it was stored for. */
  private async isNewStream(nextOffset: number, lastEntry: string | null): Promise<boolean> {
    if ((await landCheckpoint(this.broker, this.stream, randomUUID(), 10_000)) < nextOffset) return true;
    if (nextOffset === 0 || lastEntry === null) return false;
    const there = await fingerprintAt(this.broker, this.stream, nextOffset - 1, 5_000);
    return there !== undefined && there !== lastEntry;
  }

  private async checkStream(): Promise<void> {
    if (!this.session || this.next === undefined || this.stopped) return;
    try {
      if (!(await this.isNewStream(this.next, this.lastEntry ?? null)) || !this.session) return;
    } catch {
      return; // the broker is not taking appends yet; the next reconnect looks again
    }
    await this.resign();
    void this.tryToLead();
  }

  private receive(delivery: Delivery, generation: number, subscription: number): void {
    const offset = offsetOf(delivery.message.properties.headers);
    // A stream hands out whole chunks: entries before the requested offset are already stored.
    if (generation !== this.generation || subscription !== this.subscription || offset === undefined || (this.next !== undefined && offset < this.next)) {
      delivery.ack();
      return;
    }
    this.lastReceivedAt = Date.now();
    const last = this.buffer.at(-1);
    if (last && offset <= last.offset) {
      delivery.ack();
      return;
    }
    this.buffer.push({ offset, delivery, bytes: delivery.message.content.length });
    this.countBuffer();
    if (this.state.pendingBytes > (this.options.bufferBytes ?? BUFFER_BYTES)) {
      // The prefetch bounds messages, not bytes.
      this.paused = true;
      void this.unsubscribe();
    }
    if (this.buffer.length >= BATCH_MESSAGES || this.paused) this.kick();
    else this.flushTimer ??= setTimeout(() => this.kick(), 20);
  }

  private countBuffer(): void {
    this.state.pending = this.buffer.length;
    this.state.pendingBytes = this.buffer.reduce((bytes, item) => bytes + item.bytes, 0);
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

  private prepare(): Prepared | undefined {
    const after = Math.max(this.preparedUpTo ?? -1, (this.next ?? 0) - 1);
    const limits = { messages: BATCH_MESSAGES, bytes: this.options.maxBatchBytes ?? BATCH_BYTES };
    const batch = prepareBatch(this.buffer, after, limits, this.checkpoints);
    if (batch) this.preparedUpTo = batch.items.at(-1)!.offset;
    return batch;
  }

  /** Stores batches in stream order; the next is prepared while one is in PostgreSQL. */
  private async write(): Promise<void> {
    let current = this.prepare();
    while (current) {
      const session = this.session;
      if (!session) return;
      const batch = current;
      // Its own trace: a batch holds many webhooks' records.
      const storing = inSpan(
        'insert delivery log',
        { kind: SpanKind.CLIENT, attributes: { 'db.system.name': 'postgresql', 'db.operation.name': 'INSERT', 'db.operation.batch.size': batch.records.length, [ATTR.messagingDestination]: this.stream } },
        () => this.writer.store(session, batch),
      );
      // Handled before the setImmediate: an unhandled rejection ends a Node 20 process.
      storing.catch(() => {});
      await new Promise((resolve) => setImmediate(resolve));
      const next = this.prepare();
      await storing;
      this.next = current.nextOffset;
      this.lastEntry = current.lastEntry;
      // A disconnect may have cleared the buffer meanwhile, and it was read again: drop, and ack, only what was stored.
      for (const item of current.items) settle(item);
      this.buffer = this.buffer.filter((p) => p.offset >= this.next! || (settle(p), false));
      this.countBuffer();
      this.state.recordsStored += current.records.length;
      if (current.caughtUpAt) this.state.caughtUpAt = Math.max(this.state.caughtUpAt ?? 0, current.caughtUpAt.getTime());
      this.resumeIfDrained();
      current = next;
    }
  }

  private resumeIfDrained(): void {
    if (!this.paused || this.state.pendingBytes > (this.options.bufferBytes ?? BUFFER_BYTES) / 2 || !this.session) return;
    this.paused = false;
    this.state.resubscribed++;
    void this.subscribe().catch((err) => this.logger.warn('delivery recorder cannot subscribe again yet; the next reconnect does', { error: (err as Error).message }));
  }

  /** Every few seconds: the liveness check and a checkpoint appended; retention hourly. A failure gives the lead up. */
  private idle(session: Session): void {
    if (this.stopped || this.session !== session) return;
    let sinceExpiry = 0;
    const every = this.options.checkpointEveryMs ?? 5_000;
    this.idling = new Periodic(async () => {
      await this.checkLiveness();
      await this.appendCheckpoint();
      if ((sinceExpiry += every) >= 3_600_000) {
        sinceExpiry = 0;
        await this.expire(session);
      }
    }, () => every, { failed: (err) => void this.giveUp(err as Error) });
    void this.idling.start();
  }

  private async appendCheckpoint(): Promise<void> {
    if (!this.broker.isConnected || this.checkpoints.size >= 1_000) return;
    const id = randomUUID();
    // Recorded before the append: the consumer may read it back before the confirm arrives.
    this.checkpoints.set(id, Date.now());
    try {
      await appendCheckpoint(this.broker, this.stream, id, 10_000);
    } catch {
      this.checkpoints.delete(id); // the broker is not taking appends: behind grows, as it should
    }
  }

  private async checkLiveness(): Promise<void> {
    const deadline = this.options.livenessDeadlineMs ?? 30_000;
    const now = Date.now();
    if (this.paused || this.writing || this.buffer.length > 0 || !this.broker.isConnected) return;
    if (now - Math.min(...this.checkpoints.values()) < deadline || now - this.lastReceivedAt < deadline) return;
    this.logger.warn('delivery recorder consumer stopped receiving; subscribing again', { stream: this.stream, silentForMs: now - this.lastReceivedAt });
    this.checkpoints.clear();
    this.state.resubscribed++;
    await this.unsubscribe();
    await this.subscribe();
  }

  /**
   * At the lead and hourly: today's and tomorrow's partitions made, and what is past retention
   * dropped, each waiting at most UPKEEP_LOCK_WAIT for the table's lock, not the session's lock
   * timeout: behind a long read that would give the lead up. Refused, they wait for the next upkeep.
   */
  private async expire(session: Session): Promise<void> {
    const upkeep = withLockWait(session, UPKEEP_LOCK_WAIT);
    try {
      // By PostgreSQL's clock, as the partitions are made: never this host's.
      const now = await ensureDaysAhead(upkeep, 'delivery_records');
      const dropped = await dropExpiredPartitions(upkeep, this.options.retentionMs, new Date(now));
      if (dropped.length > 0) this.logger.info('delivery log partitions dropped', { dropped });
    } catch (err) {
      // A delete past the statement timeout too: the lead must not wait for a pile's upkeep to finish.
      if (!isLockRefused(err) && !isTimeout(err)) throw err;
      this.logger.warn('delivery log partitions not made or dropped: a read holds the table, or a delete ran past the statement timeout; tried again at the next upkeep', { error: (err as Error).message });
    }
  }

  /** The database went away under the leader: forget what was read, take the lead again later. */
  private async giveUp(err: Error): Promise<void> {
    if (!this.session) return;
    this.logger.warn('delivery recorder lost its database session; will resume from the stored offset', { error: err.message });
    await this.resign();
    this.leadLater();
  }

  private async resign(): Promise<void> {
    this.generation++;
    this.preparedUpTo = undefined;
    this.paused = false;
    this.checkpoints.clear();
    void this.idling?.stop();
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const session = this.session;
    this.session = undefined;
    this.state.leading = false;
    for (const item of this.buffer) settle(item);
    this.buffer = [];
    this.countBuffer();
    await this.unsubscribe();
    // Closing the session releases the advisory lock.
    await session?.close();
  }
}
