import type { BrokerConnection } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { Periodic } from '../runtime/periodic.js';

/** How often each dispatcher fills the failed stream's open segment: at every multiple of this (UTC). */
export const FAILED_ROLLOVER_EVERY_MS = 8 * 3_600_000;

/**
 * Keeps a stream's x-max-age true however little is written to it: RabbitMQ 3.10 deletes only closed
 * segments. At every multiple of `everyMs` (the clock's, so a restart keeps the schedule) an entry
 * of `bytes` (the segment size) fills the open segment: an entry is gone at most max age + 2 × everyMs
 * after it was written.
 */
export class StreamRollover {
  private stopped = false;
  private readonly appends = new Periodic(() => this.append(), () => this.options.everyMs - (Date.now() % this.options.everyMs), { waitFirst: true });

  constructor(
    private readonly broker: BrokerConnection,
    private readonly stream: string,
    private readonly options: { bytes: number; everyMs: number; logger: Logger },
  ) {}

  start(): void {
    if (!this.stopped) void this.appends.start();
  }

  /** Waits for an append under way. Safe twice. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.appends.stop();
  }

  private async append(): Promise<void> {
    if (!this.broker.isConnected) return; // the next one fills the segment
    try {
      await this.broker.sendToQueue(this.stream, Buffer.alloc(this.options.bytes, 0x20), { headers: { [HEADERS.entryType]: ENTRY_TYPES.rollover } }, 30_000);
    } catch (err) {
      this.options.logger.warn('stream rollover entry not appended; the next one fills the segment', { stream: this.stream, error: (err as Error).message });
    }
  }
}
