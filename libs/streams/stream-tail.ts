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
  /** Backoff for a checkpoint append that failed, so readiness recovers without a reconnect. */
  checkpointRetryMs?: readonly number[];
  /** A checkpoint not confirmed within this (flow control) is appended again. */
  checkpointDeadlineMs?: number;
}

/**
 * Follows a stream from its first offset and live after that: the failed index, the retry watch
 * and the merchant directory are each a state built from one. After a reconnect it resumes just
 * past the last entry applied instead of replaying it all; it is caught up once it reads back the
 * checkpoint it appended after (re)connecting.
 */
export class StreamTail {
  private nextOffset: number | undefined;
  private checkpointId: string | undefined;
  private caughtUp = false;
  private consumer?: Consumer;
  private checkpointTimer?: NodeJS.Timeout;
  private stopped = false;
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
  ) {}

  /** Caught up and still connected: what was built is up to date. */
  get ready(): boolean {
    return this.caughtUp && this.broker.isConnected;
  }

  async start(): Promise<void> {
    this.broker.on('connected', this.onConnected);
    this.broker.on('disconnected', this.onDisconnected);
    this.consumer = await this.broker.consume(this.stream, {
      prefetch: this.options.prefetch,
      arguments: () => ({ 'x-stream-offset': this.nextOffset ?? 'first' }),
      onMessage: (delivery) => this.apply(delivery),
    });
    await this.appendCheckpoint();
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
    try {
      await appendCheckpoint(this.broker, this.stream, id, this.options.checkpointDeadlineMs ?? 10_000);
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
