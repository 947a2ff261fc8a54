import { randomUUID } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import { type BrokerConnection, BrokerUnavailableError, type Consumer, type Delivery } from '../broker/index.js';
import { HEADERS } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { appendCheckpoint, CHECKPOINT, isCheckpoint, offsetOf } from './entries.js';

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
  private readonly onConnected = () => void this.appendCheckpoint();
  private readonly onDisconnected = () => {
    this.caughtUp = false;
  };

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
    const old = this.consumer;
    this.consumer = undefined;
    await old?.cancel();
    this.options.onReset?.();
    if (this.stopped) return;
    await this.follow();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.checkpointTimer);
    this.broker.off('connected', this.onConnected);
    this.broker.off('disconnected', this.onDisconnected);
    await this.consumer?.cancel();
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
        const landedAt = await this.probe(id, deadlineMs);
        if (landedAt < resumedAt && !this.stopped && this.checkpointId === id) {
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

  /** Appends checkpoint `id` and reads where it landed, from a reader attached at the stream's end. */
  private async probe(id: string, timeoutMs: number): Promise<number> {
    let found!: (offset: number) => void;
    let failed!: (err: Error) => void;
    const landed = new Promise<number>((resolve, reject) => {
      found = resolve;
      failed = reject;
    });
    landed.catch(() => {}); // settled before it is awaited when the append fails
    const reader = await this.broker.openReader(this.stream, {
      prefetch: 100,
      arguments: { 'x-stream-offset': 'next' },
      onMessage: (message) => {
        if (!message) return failed(new BrokerUnavailableError(`the broker cancelled the probe of ${this.stream}`));
        const offset = offsetOf(message.properties.headers);
        if (offset !== undefined && isCheckpoint(message.properties.headers, id)) found(offset);
      },
      onClose: () => failed(new BrokerUnavailableError(`channel closed while probing ${this.stream}`)),
    });
    const timer = setTimeout(() => failed(new BrokerUnavailableError(`checkpoint not read back from ${this.stream} within ${timeoutMs} ms`)), timeoutMs);
    try {
      await appendCheckpoint(this.broker, this.stream, id, timeoutMs);
      return await landed;
    } finally {
      clearTimeout(timer);
      await reader.close();
    }
  }

  private apply(delivery: Delivery): void {
    const { message } = delivery;
    const headers = message.properties.headers;
    const offset = offsetOf(headers);
    delivery.ack();
    if (offset === undefined) return;
    if (this.nextOffset !== undefined && offset < this.nextOffset) return; // already applied before a reconnect
    this.nextOffset = offset + 1;
    if (isCheckpoint(headers, this.checkpointId)) {
      if (this.caughtUp) return;
      this.caughtUp = true;
      this.options.onCaughtUp?.(offset);
      for (const wake of [...this.waiters]) wake();
      return;
    }
    if (headers?.[HEADERS.entryType] === CHECKPOINT) return; // another reader's
    this.options.onEntry(message, offset);
  }
}
