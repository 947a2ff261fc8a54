import { randomUUID } from 'node:crypto';
import type { BrokerConnection, Consumer, Delivery } from '../broker/index.js';
import { ENTRY_TYPES } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { appendCheckpoint, isCheckpoint } from './checkpoint.js';
import { decodeResolution, entryTypeOf, failureKeysOf, offsetOf, type Resolution } from './entries.js';

/**
 * `(merchantId, reference) → offsets of unresolved failure entries`, built by tailing the failed
 * stream from its first offset and following it live. Offsets, not payloads: an entry costs a
 * map slot and a number. Ready once the replay has reached the checkpoint this instance appended
 * after (re)connecting.
 */
export class FailedIndex {
  private readonly offsets = new Map<string, number | number[]>();
  private unresolved = 0;
  private nextOffset: number | undefined;
  private checkpointId: string | undefined;
  private caughtUp = false;
  private consumer?: Consumer;
  private readonly onConnected = () => void this.appendCheckpoint();
  private readonly onDisconnected = () => {
    this.caughtUp = false;
  };

  constructor(
    private readonly broker: BrokerConnection,
    private readonly stream: string,
    private readonly logger: Logger,
  ) {}

  get ready(): boolean {
    return this.caughtUp && this.broker.isConnected;
  }

  /** Unresolved failure entries in the index. */
  get size(): number {
    return this.unresolved;
  }

  async start(): Promise<void> {
    this.broker.on('connected', this.onConnected);
    this.broker.on('disconnected', this.onDisconnected);
    this.consumer = await this.broker.consume(this.stream, {
      prefetch: 2_000,
      // After a reconnect, resume just past the last entry applied instead of replaying it all.
      arguments: () => ({ 'x-stream-offset': this.nextOffset ?? 'first' }),
      onMessage: (delivery) => this.apply(delivery),
    });
    await this.appendCheckpoint();
  }

  async stop(): Promise<void> {
    this.broker.off('connected', this.onConnected);
    this.broker.off('disconnected', this.onDisconnected);
    await this.consumer?.cancel();
  }

  /** Offsets of this merchant's unresolved failures for a reference, oldest first. */
  lookup(merchantId: string, reference: string): number[] {
    const found = this.offsets.get(keyOf(merchantId, reference));
    if (found === undefined) return [];
    return typeof found === 'number' ? [found] : [...found];
  }

  /** Applies a resolution at once on this instance; the stream brings it to the others. */
  resolve(resolution: Resolution): void {
    for (const { offset, references } of resolution.resolved) {
      let removed = false;
      for (const reference of references) removed = this.remove(keyOf(resolution.merchantId, reference), offset) || removed;
      if (removed) this.unresolved--;
    }
  }

  private async appendCheckpoint(): Promise<void> {
    this.caughtUp = false;
    const id = randomUUID();
    this.checkpointId = id;
    try {
      await appendCheckpoint(this.broker, this.stream, id);
    } catch (err) {
      // Not ready until a later reconnect appends one that is confirmed.
      this.logger.warn('failed index checkpoint not appended', { error: (err as Error).message });
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

    switch (entryTypeOf(headers)) {
      case ENTRY_TYPES.failure: {
        const keys = failureKeysOf(headers);
        if (!keys) return;
        for (const reference of new Set(keys.references)) this.add(keyOf(keys.merchantId, reference), offset);
        this.unresolved++;
        return;
      }
      case ENTRY_TYPES.resolution: {
        const resolution = decodeResolution(message.content);
        if (resolution) this.resolve(resolution);
        return;
      }
      case ENTRY_TYPES.checkpoint:
        if (isCheckpoint(headers, this.checkpointId) && !this.caughtUp) {
          this.caughtUp = true;
          this.logger.info('failed index caught up', { unresolved: this.unresolved, offset });
        }
        return;
      default:
        return;
    }
  }

  private add(key: string, offset: number): void {
    const existing = this.offsets.get(key);
    if (existing === undefined) this.offsets.set(key, offset);
    else if (typeof existing === 'number') this.offsets.set(key, [existing, offset]);
    else existing.push(offset);
  }

  private remove(key: string, offset: number): boolean {
    const existing = this.offsets.get(key);
    if (existing === undefined) return false;
    if (typeof existing === 'number') {
      if (existing !== offset) return false;
      this.offsets.delete(key);
      return true;
    }
    const at = existing.indexOf(offset);
    if (at < 0) return false;
    existing.splice(at, 1);
    if (existing.length === 1) this.offsets.set(key, existing[0]!);
    return true;
  }
}

function keyOf(merchantId: string, reference: string): string {
  return `${merchantId}\u0000${reference}`;
}
