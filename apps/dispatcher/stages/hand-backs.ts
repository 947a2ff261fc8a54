import type { Logger } from '../../../libs/logger/index.js';
import { type Span, spanLogFields } from '../../../libs/tracing/index.js';
import { WriteRefusedError } from '../../../libs/runtime/index.js';
import { type TakeResult, WAIT_TAKE_LIMIT, type WaitStore, WaitTaker, type WaitWriter } from '../../../libs/waits/index.js';
import type { Finding } from './decide.js';
import { endWaitOrLog, waitKeyOf } from './effect.js';
import type { HandBack, IntakeEvent } from './intake.js';

/**
 * The takes of waits handed back (WaitTaker): only a wait's current hand comes to an attempt, and a
 * wait taken past WAIT_TAKE_LIMIT times with no outcome rewriting or ending it is parked; a
 * hand-back is a new message each lease, which dispatch's delivery limit never counts.
 */
export class HandBackTakes {
  private readonly taker: WaitTaker;
  /** The walks whose take was counted here (untake). */
  private readonly counted = new WeakSet<IntakeEvent>();

  constructor(private readonly waits: { store: WaitStore; writer: WaitWriter }, leaseMs: number, private readonly logger: Logger, private readonly stopping: () => boolean) {
    this.taker = new WaitTaker(waits.store, leaseMs);
  }

  /** The take; a wait whose place ended (a dispatcher killed between the two ends) is ended: stale. */
  private async took(handBack: HandBack, again = false): Promise<TakeResult> {
    const took = await this.taker.take({ ...waitKeyOf(handBack), hand: handBack.hand, again });
    if (took !== 'ended') return took;
    await endWaitOrLog(this.waits.writer, { ...waitKeyOf(handBack), hand: handBack.hand }, this.logger);
    return 'stale';
  }

  /**
   * Undefined: taken to its attempt. Else what ends its walk: superseded, or parked (spent).
   * PostgreSQL not answering or refusing its row takes it anyway (a duplicate is better than a
   * webhook held back), but an ordered one is held until PostgreSQL takes it, or its channel closes
   * (the broker gives it to another, and this copy sends nothing). `again`: the retake of one that
   * waited for its slot, its lease renewed but not counted.
   */
  async take(intake: IntakeEvent, hand: number, span: Span | undefined, live: () => boolean, again = false): Promise<Finding | undefined> {
    for (let tries = 0; ; tries++) {
      if (tries > 0 && !live()) return { kind: 'stopping' };
      try {
        const took = await this.took({ ...intake, hand }, again);
        if (took === 'taken' && !again) this.counted.add(intake);
        if (took === 'taken') return undefined;
        if (took === 'stale') return { kind: 'superseded', key: `${intake.webhookId}#${hand}` };
        this.logger.warn('wait taken too often without an outcome: parked, its row left out of the pick', { merchantId: intake.merchantId, endpointId: intake.endpointId, webhookId: intake.webhookId, ...spanLogFields(span) });
        const detail = `its hand-backs came to their attempt ${WAIT_TAKE_LIMIT} times and none rewrote or ended its wait (PostgreSQL refused its end, or each attempt's dispatcher died): its row is left out of the pick`;
        return { kind: 'invalid', code: 'wait-not-ended', detail, handTaken: { ...intake, hand } };
      } catch (err) {
        if (!intake.ordered || this.stopping()) {
          this.logger.warn(err instanceof WriteRefusedError ? 'wait not taken: PostgreSQL refuses its row; attempted anyway' : 'wait not taken: PostgreSQL did not answer; attempted anyway', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error)?.message, ...spanLogFields(span) });
          return undefined;
        }
        if (tries % 30 === 0) this.logger.warn(err instanceof WriteRefusedError ? 'ordered wait not taken: PostgreSQL refuses its row; held until it takes it' : 'ordered wait not taken: PostgreSQL did not answer; held until it does', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error)?.message, ...spanLogFields(span) });
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  }

  /**
   * A hand-back given back untried: its take is not counted, or rolling restarts alone would walk its
   * wait to the park. PostgreSQL not answering leaves it counted.
   */
  async untake(intake: IntakeEvent): Promise<void> {
    if (intake.hand === undefined || !this.counted.delete(intake)) return;
    await this.waits.store.untake({ ...waitKeyOf(intake), hand: intake.hand }).catch((err: unknown) => {
      this.logger.warn('hand-back given back untried with its take still counted: PostgreSQL did not uncount it', { merchantId: intake.merchantId, webhookId: intake.webhookId, error: (err as Error)?.message });
    });
  }

  /** Whether a hand-back about to be parked is its wait's current hand; undefined when PostgreSQL does not answer. */
  async current(handBack: HandBack): Promise<boolean | undefined> {
    try {
      return (await this.took(handBack)) !== 'stale';
    } catch {
      return undefined;
    }
  }
}
