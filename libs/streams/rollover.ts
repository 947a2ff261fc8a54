import type { BrokerConnection } from '../broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';

export const ROLLOVER = ENTRY_TYPES.rollover;

/** How often each dispatcher fills the failed stream's open segment: at every multiple of this (UTC). */
export const FAILED_ROLLOVER_EVERY_MS = 8 * 3_600_000;

/**
 * Keeps a stream's x-max-age true however little is written to it. RabbitMQ 3.10 applies a
 * stream's retention only when it opens a new segment, and deletes only closed segments whose
 * newest entry is older than the max age, never the open one: a stream written less than a segment
 * between two looks keeps its entries for ever. So at every multiple of `everyMs` (on the host's
 * clock: a schedule, not an order) an entry of `bytes` (the stream's segment size) is appended. It
 * fills the open segment, so the next append, at the latest the next rollover, opens a new one and
 * the broker applies the retention: an entry is gone at most max age + 2 × everyMs after it was
 * written. Every dispatcher does it (each rollover costs `bytes` of disk until it expires); one
 * that restarts keeps the schedule, since it is the clock's multiples, not its start time.
 */
export class StreamRollover {
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private appending?: Promise<void>;

  constructor(
    private readonly broker: BrokerConnection,
    private readonly stream: string,
    private readonly options: { bytes: number; everyMs: number; logger: Logger },
  ) {}

  /** Safe twice. */
  start(): void {
    if (this.timer || this.stopped) return;
    this.schedule();
  }

  /** Waits for an append under way. Safe twice. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.appending;
  }

  private schedule(): void {
    if (this.stopped) return;
    const { everyMs } = this.options;
    const now = Date.now();
    this.timer = setTimeout(() => {
      this.appending = this.append().finally(() => {
        this.appending = undefined;
        this.schedule();
      });
    }, Math.ceil((now + 1) / everyMs) * everyMs - now);
  }

  private async append(): Promise<void> {
    if (!this.broker.isConnected) return; // the next one fills the segment
    try {
      await this.broker.sendToQueue(this.stream, Buffer.alloc(this.options.bytes, 0x20), { headers: { [HEADERS.entryType]: ROLLOVER } }, 30_000);
    } catch (err) {
      this.options.logger.warn('stream rollover entry not appended; the next one fills the segment', { stream: this.stream, error: (err as Error).message });
    }
  }
}
