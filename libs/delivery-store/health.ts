import type { Queryable } from './database.js';
import { caughtUpAt } from './materialise.js';

export interface LogHealthState {
  /** 'up': PostgreSQL answered the last check; 'unreachable': it did not. */
  database: 'up' | 'unreachable';
  /** Seconds since the log last held everything the recorder had read; null before the first write. */
  behindSeconds: number | null;
}

/**
 * How far behind the delivery log is, checked in the background every few seconds so that
 * /readyz and /metrics answer at once even while PostgreSQL hangs.
 */
export class LogHealth {
  private timer?: NodeJS.Timeout;
  private checking = false;
  private database: LogHealthState['database'] = 'unreachable';
  /** When the log last held every record read, as last seen; undefined before the first write. */
  private caughtUp?: Date;

  /**
   * Counted at each read from the time last seen: while PostgreSQL does not answer, no recorder
   * can store anything, so the log is at least that far behind and the figure goes on growing
   * (it stood still at its last value, and an alert on it never fired during an outage).
   */
  get state(): LogHealthState {
    const behindSeconds = this.caughtUp ? Math.max(0, Math.round((Date.now() - this.caughtUp.getTime()) / 1000)) : null;
    return { database: this.database, behindSeconds };
  }

  constructor(
    private readonly db: Queryable,
    private readonly stream: string,
    private readonly everyMs = 2_000,
  ) {}

  async start(): Promise<void> {
    await this.check();
    this.timer = setInterval(() => void this.check(), this.everyMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async check(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      this.caughtUp = (await caughtUpAt(this.db, this.stream)) ?? undefined;
      this.database = 'up';
    } catch (err) {
      // No table yet: PostgreSQL answered, and no recorder has led on this database so far.
      if ((err as { code?: string })?.code === '42P01') [this.database, this.caughtUp] = ['up', undefined];
      else this.database = 'unreachable';
    } finally {
      this.checking = false;
    }
  }
}
