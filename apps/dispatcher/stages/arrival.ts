import type { BrokerConnection } from '../../../libs/broker/index.js';
import type { Logger } from '../../../libs/logger/index.js';
import { appendArrived, type RetryWatch } from '../../../libs/stranded-retries/index.js';
import type { Wait } from './intake.js';

/**
 * Intake's first question for a copy of a wait (back from a tier, recovered, resent): is it the
 * one to deliver? The first copy of a wait to arrive, by the retries journal's order, is.
 */
export class Arrivals {
  constructor(
    private readonly deps: { broker: BrokerConnection; journal: string; logger: Logger; retryWatch?: RetryWatch },
    /** Background work stop() must wait for. */
    private readonly track: (work: Promise<void>) => void,
  ) {}

  /**
   * A copy without a copy id (written before copy ids existed) and a dispatcher without a retry
   * watch only record the arrival, in the background, and deliver.
   */
  async isFirst(wait: Wait): Promise<boolean> {
    const watch = this.deps.retryWatch;
    if (watch && wait.copyId !== undefined) return watch.arrive(wait.key, wait.copyId);
    this.track(
      appendArrived(this.deps.broker, this.deps.journal, { key: wait.key, copyId: wait.copyId }, 10_000).catch((err: unknown) => {
        this.deps.logger.warn('retry arrival not recorded; the retry watch may put back a copy', { key: wait.key, error: (err as Error).message });
      }),
    );
    return true;
  }
}
