import { Periodic } from '../runtime/periodic.js';
import type { Queryable } from './database.js';
import { storedPlace } from './materialise.js';

export interface LogHealthState {
  /** Whether PostgreSQL answered the last check. */
  database: 'up' | 'unreachable';
  /** Seconds since the log last held everything the recorder had read; null before the first write. */
  behindSeconds: number | null;
}

/** How far behind the delivery log is, checked in the background so that /readyz answers at once while PostgreSQL hangs. */
export class LogHealth {
  private readonly checks = new Periodic(() => this.check(), () => this.everyMs);
  private stopped = false;
  private database: LogHealthState['database'] = 'unreachable';
  private caughtUp?: Date;

  /** Counted at each read: while PostgreSQL does not answer, it goes on growing. */
  get state(): LogHealthState {
    const behindSeconds = this.caughtUp ? Math.max(0, Math.round((Date.now() - this.caughtUp.getTime()) / 1000)) : null;
    return { database: this.database, behindSeconds };
  }

  constructor(
    private readonly db: Queryable,
    private readonly stream: string,
    private readonly everyMs = 2_000,
  ) {}

  /** Checks once, then every everyMs until stop(); safe twice, and a no-op once stopped. */
  async start(): Promise<void> {
    if (!this.stopped) await this.checks.start();
  }

  stop(): void {
    this.stopped = true;
    void this.checks.stop();
  }

  private async check(): Promise<void> {
    try {
      this.caughtUp = (await storedPlace(this.db, this.stream))?.caughtUpAt;
      this.database = 'up';
    } catch (err) {
      // No table yet: PostgreSQL answered, and no recorder has led on this database so far.
      if ((err as { code?: string })?.code === '42P01') [this.database, this.caughtUp] = ['up', undefined];
      else this.database = 'unreachable';
    }
  }
}
