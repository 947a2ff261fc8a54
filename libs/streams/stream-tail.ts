import { randomUUID } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import { type BrokerConnection, BrokerUnavailableError, type Consumer, type Delivery } from '../broker/index.js';
import { HEADERS } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { appendCheckpoint, CHECKPOINT, isCheckpoint, offsetOf } from './entries.js';
import { landCheckpoint, stillHolds } from './probe.js';

export interface StreamTailOptions {
  prefetch: number;
  /** Every entry but checkpoints, in stream order, once each across reconnects. */
  onEntry(message: ConsumeMessage, offset: number): void;
  /** After each (re)connect, when the replay has reached the checkpoint appended on connecting. */
  onCaughtUp?(offset: number): void;
  /**
   * The stream was deleted and declared again (its offsets start over): forget everything built
   * from it; every entry of the new stream follows, from its first.
   */
  onReset?(): void;
  /** Backoff for a checkpoint append that failed, so readiness recovers without a reconnect. */
  checkpointRetryMs?: readonly number[];
  /** A checkpoint not confirmed within this (flow control) is appended again. */
  checkpointDeadlineMs?: number;
  /** Start here instead of the first offset (what comes before was read from a snapshot). */
  startAt?: number;
  /** A tail that has read nothing for this long checks that it still reads (0: never on its own). */
  idleCheckMs?: number;
  /** A liveness checkpoint not read back within this means the tail stopped reading: subscribe again. */
  livenessDeadlineMs?: number;
}

/**
 * Follows a stream from its first offset and live after that: the failed index, the retry watch
 * and the merchant directory are each a state built from one. After a reconnect it resumes just
 * past the last entry applied instead of replaying it all; it is caught up once it reads back the
 * checkpoint it appended after (re)connecting.
 *
 * An operator may delete the stream; the next connect declares it again, empty, and its offsets
 * start over, so resuming at the old offset would wait past its end for ever. After each
 * reconnect the tail learns where its own checkpoint landed (a probe reading from 'next'); an
 * offset below the one it resumes at means a new stream: it starts again from the first entry.
 *
 * A consumer can also stop receiving while its channel and connection stay open (seen on a
 * three-node 3.10 cluster after a stream leader was killed: over a minute without a delivery while
 * appends were confirmed). So a tail idle for `idleCheckMs`, or asked by a writer whose entry did
 * not come back (`verifyLive`), appends a checkpoint of its own; if its consumer does not read it
 * back in time, it subscribes again from just past the last entry it applied.
 */
export class StreamTail {
  private nextOffset: number | undefined;
  private checkpointId: string | undefined;
  private caughtUp = false;
  private consumer?: Consumer;
  private checkpointTimer?: NodeJS.Timeout;
  private stopped = false;
  /** Bumped at each restart: deliveries still coming from the consumer before it are ignored. */
  private generation = 0;
  private readonly waiters = new Set<() => void>();
  private lastReadAt = performance.now();
  private idleTimer?: NodeJS.Timeout;
  private verifying?: Promise<void>;
  private liveness?: { id: string; seen: () => void };
  readonly stats = { resubscribed: 0 };
  private readonly onConnected = () => void this.appendCheckpoint();
  private readonly onDisconnected = () => {
    this.caughtUp = false;
    // Checked on the reconnect: the consumer resumes before it, and may read past it.
    this.appliedBeforeDrop ??= this.lastApplied;
  };
  /**
   * The last entry applied, and the one applied before the connection dropped: on the reconnect
   * the stream must still hold it at its offset, or it is a new stream (deleted and declared again)
   * that has grown past where this tail stopped, which the checkpoint's offset alone cannot tell.
   */
  private lastApplied?: ConsumeMessage;
  private appliedBeforeDrop?: ConsumeMessage;

  constructor(
    private readonly broker: BrokerConnection,
    readonly stream: string,
    private readonly logger: Logger,
    private readonly options: StreamTailOptions,
  ) {
    this.nextOffset = options.startAt;
  }

  /** Caught up and still connected: what was built is up to date. */
  get ready(): boolean {
    return this.caughtUp && this.broker.isConnected;
  }

  async start(): Promise<void> {
    this.broker.on('connected', this.onConnected);
    this.broker.on('disconnected', this.onDisconnected);
    await this.follow();
    await this.appendCheckpoint();
    const idleMs = this.options.idleCheckMs ?? 30_000;
    if (idleMs > 0) {
      this.idleTimer = setInterval(() => {
        if (performance.now() - this.lastReadAt >= idleMs) void this.verifyLive();
      }, idleMs);
      this.idleTimer.unref();
    }
  }

  /**
   * Checks that the consumer still reads: appends a checkpoint and waits for it; when the append
   * is confirmed and the checkpoint does not come back, subscribes again from where the tail is.
   * Calls while one check runs share it. A broker that refuses the append is not a stalled tail
   * (the connection's own recovery handles it).
   */
  verifyLive(): Promise<void> {
    this.verifying ??= this.checkLive().finally(() => {
      this.verifying = undefined;
    });
    return this.verifying;
  }

  private async checkLive(): Promise<void> {
    if (this.stopped || !this.broker.isConnected || !this.consumer) return;
    const id = randomUUID();
    const deadlineMs = this.options.livenessDeadlineMs ?? 5_000;
    let timer: NodeJS.Timeout | undefined;
    const seen = new Promise<boolean>((resolve) => {
      this.liveness = { id, seen: () => resolve(true) };
      timer = setTimeout(() => resolve(false), deadlineMs);
    });
    try {
      try {
        await appendCheckpoint(this.broker, this.stream, id, deadlineMs);
      } catch {
        return;
      }
      if ((await seen) || this.stopped || this.liveness?.id !== id) return;
      this.stats.resubscribed++;
      this.logger.warn('stream tail stopped reading; subscribing again', { stream: this.stream, resumeAt: this.nextOffset, deadlineMs });
      await this.resubscribe();
    } finally {
      clearTimeout(timer);
      if (this.liveness?.id === id) this.liveness = undefined;
    }
  }

  /** A new consumer from just past the last entry applied; caught up again once it reads a new checkpoint. */
  private async resubscribe(): Promise<void> {
    this.generation++;
    const old = this.consumer;
    this.consumer = undefined;
    await old?.close();
    if (this.stopped) return;
    await this.follow();
    await this.appendCheckpoint();
  }

  private async follow(): Promise<void> {
    const generation = this.generation;
    this.consumer = await this.broker.consume(this.stream, {
      prefetch: this.options.prefetch,
      arguments: () => ({ 'x-stream-offset': this.nextOffset ?? 'first' }),
      onMessage: (delivery) => {
        if (generation === this.generation) this.apply(delivery);
        else delivery.ack();
      },
    });
  }

  /** The stream is a new one: drop what was built from the old one and read this one from its start. */
  private async restart(): Promise<void> {
    this.logger.warn('stream deleted and declared again; reading it from its first entry', { stream: this.stream, resumedAt: this.nextOffset });
    this.generation++;
    this.caughtUp = false;
    this.nextOffset = undefined;
    this.lastApplied = undefined;
    this.appliedBeforeDrop = undefined;
    const old = this.consumer;
    this.consumer = undefined;
    await old?.close();
    this.options.onReset?.();
    if (this.stopped) return;
    await this.follow();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.checkpointTimer);
    clearInterval(this.idleTimer);
    this.liveness?.seen(); // a check in progress ends now
    this.broker.off('connected', this.onConnected);
    this.broker.off('disconnected', this.onDisconnected);
    await this.consumer?.close();
    await this.verifying;
  }

  /** Resolves once caught up; a program waits for it before it acts on what the stream says. */
  waitUntilCaughtUp(timeoutMs: number): Promise<void> {
    if (this.caughtUp) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(done);
        reject(new BrokerUnavailableError(`${this.stream} not read up to date within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.add(done);
    });
  }

  private async appendCheckpoint(attempt = 0): Promise<void> {
    clearTimeout(this.checkpointTimer);
    this.caughtUp = false;
    const id = randomUUID();
    this.checkpointId = id;
    const deadlineMs = this.options.checkpointDeadlineMs ?? 10_000;
    try {
      const resumedAt = this.nextOffset;
      if (resumedAt === undefined) {
        await appendCheckpoint(this.broker, this.stream, id, deadlineMs);
      } else {
        const landedAt = await landCheckpoint(this.broker, this.stream, id, deadlineMs);
        const before = this.appliedBeforeDrop;
        const replaced = landedAt < resumedAt || (before !== undefined && !(await stillHolds(this.broker, this.stream, before, deadlineMs)));
        // Kept when the read failed (thrown above): the retried checkpoint checks it again.
        if (this.appliedBeforeDrop === before) this.appliedBeforeDrop = undefined;
        if (replaced && !this.stopped && this.checkpointId === id) {
          await this.restart();
          return void (await this.appendCheckpoint());
        }
      }
    } catch (err) {
      if (this.stopped) return;
      const backoff = this.options.checkpointRetryMs ?? [500, 1_000, 2_000, 5_000, 10_000, 30_000];
      const delay = backoff[Math.min(attempt, backoff.length - 1)]!;
      this.logger.warn('stream checkpoint not appended; retrying', { stream: this.stream, error: (err as Error).message, retryInMs: delay });
      this.checkpointTimer = setTimeout(() => {
        if (this.checkpointId === id && !this.stopped) void this.appendCheckpoint(attempt + 1);
      }, delay);
      this.checkpointTimer.unref();
    }
  }

  private apply(delivery: Delivery): void {
    const { message } = delivery;
    const headers = message.properties.headers;
    const offset = offsetOf(headers);
    delivery.ack();
    this.lastReadAt = performance.now();
    if (offset === undefined) return;
    if (this.nextOffset !== undefined && offset < this.nextOffset) return; // already applied before a reconnect
    this.nextOffset = offset + 1;
    this.lastApplied = message;
    if (isCheckpoint(headers, this.checkpointId)) {
      if (this.caughtUp) return;
      this.caughtUp = true;
      this.options.onCaughtUp?.(offset);
      for (const wake of [...this.waiters]) wake();
      return;
    }
    if (this.liveness && isCheckpoint(headers, this.liveness.id)) return this.liveness.seen();
    if (headers?.[HEADERS.entryType] === CHECKPOINT) return; // another reader's
    this.options.onEntry(message, offset);
  }
}
