import type { BrokerConnection } from '../broker/index.js';
import { HEADERS, messageFromLoggedBody, type ScalarHeaders, webhookHeaders } from '../contracts/index.js';
import type { Queryable } from '../delivery-store/index.js';
import type { Logger } from '../logger/index.js';

/**
 * The retry safety net: a ticker and a query. A webhook the delivery log says is retrying, due
 * more than the grace (RETRY_OVERDUE_AFTER) ago, has not come back from its tier (a stalled
 * dead-letter, a deleted or purged tier, a long dispatch backlog): one copy is republished to
 * dispatch from the log's payload. Exactly one of the copy and the stranded original is delivered:
 * each wait (merchant, webhook, attempts made, due time) is claimed once in `retry_claims`, by the
 * net before it republishes, or by the original when it arrives late (past its due time by more
 * than half the grace); the loser is dropped. An original on time never asks. The net only takes
 * rows the log holds everything up to: a wait due before the log's caught-up time by more than the
 * grace cannot have an attempt the log has not stored yet.
 */

/** One wait in a retry tier: what its original carries (x-attempts, x-due-at) and what the log holds. */
export interface WaitKey {
  merchantId: string;
  webhookId: string;
  /** Real attempts made before this wait. */
  attempt: number;
  /** When the wait ends, epoch ms. */
  dueAt: number;
}

export interface RetryNetOptions {
  /** RETRY_OVERDUE_AFTER: how long past its due time a wait is taken for stranded. */
  graceMs: number;
  /** How long an attempt may take before its record is on the deliveries stream (the delivery timeout and a margin). */
  attemptBoundMs: number;
  dispatch: string;
  /** The deliveries stream, whose caught_up_at in delivery_log_offsets says what the log holds. */
  deliveriesStream: string;
  /** Between two passes (default a quarter of the grace, 1 s to 30 s, jittered ±20 %). */
  tickMs?: number;
  /** Copies republished per pass at most (default 500). */
  batch?: number;
  /** A late original waits this long for its claim, then is delivered anyway (default 1 s). */
  claimTimeoutMs?: number;
  /** A publish not confirmed within this fails, and the claim is given back (default 5 s). */
  publishDeadlineMs?: number;
}

interface OverdueRow {
  merchant_id: string;
  webhook_id: string;
  event: string;
  refs: string[];
  payload: string;
  first_seen_at: Date;
  next_attempt_at: Date;
  attempt: number;
  last_http_status: number | null;
  last_error: string | null;
}

/**
 * Rows retrying and overdue, oldest first, whose log is complete past their due time by more than
 * the grace ($2) and the time an attempt takes ($3), with their wait's attempt count (the latest
 * record that scheduled it) and no live claim. A net claim never confirmed ($5 old) is taken again.
 */
const OVERDUE = `
SELECT w.merchant_id, w.webhook_id, w.event, w.refs, w.payload::text AS payload, w.first_seen_at, w.next_attempt_at,
  r.attempt_number AS attempt, w.last_http_status, w.last_error
FROM delivery_webhooks w
CROSS JOIN LATERAL (
  SELECT attempt_number FROM delivery_records r
  WHERE r.merchant_id = w.merchant_id AND r.webhook_id = w.webhook_id AND r.next_attempt_at = w.next_attempt_at
  ORDER BY r.at DESC LIMIT 1
) r
WHERE w.status = 'retrying'
  AND w.next_attempt_at < (
    SELECT least(now() - $2::float8 * interval '1 millisecond', caught_up_at - ($2::float8 / 2 + $3::float8) * interval '1 millisecond')
    FROM delivery_log_offsets WHERE stream = $1 AND caught_up_at IS NOT NULL
  )
  AND w.payload IS NOT NULL
  AND NOT EXISTS (
    SELECT 1 FROM retry_claims c
    WHERE c.merchant_id = w.merchant_id AND c.webhook_id = w.webhook_id AND c.attempt = r.attempt_number AND c.due_at = w.next_attempt_at
      AND NOT (c.claimed_by = 'net' AND c.copied_at IS NULL AND c.claimed_at < now() - $5::float8 * interval '1 millisecond')
  )
ORDER BY w.next_attempt_at
LIMIT $4`;

/** The net's claim: a new row, or a net claim whose copy was never confirmed (its dispatcher died). */
const CLAIM_FOR_COPY = `
INSERT INTO retry_claims AS c (merchant_id, webhook_id, attempt, due_at, claimed_by) VALUES ($1, $2, $3, $4, 'net')
ON CONFLICT (merchant_id, webhook_id, attempt, due_at) DO UPDATE SET claimed_at = now()
  WHERE c.claimed_by = 'net' AND c.copied_at IS NULL AND c.claimed_at < now() - $5::float8 * interval '1 millisecond'
RETURNING 1 AS claimed`;

const KEY = 'merchant_id = $1 AND webhook_id = $2 AND attempt = $3 AND due_at = $4';

export interface RetryNetStats {
  /** Copies republished to dispatch. */
  copies: number;
  /** Late originals dropped: the net had claimed their wait. */
  originalsDropped: number;
  /** Late originals delivered without an answer from PostgreSQL (down or slow). */
  claimsUnanswered: number;
}

export class RetryNet {
  readonly stats: RetryNetStats = { copies: 0, originalsDropped: 0, claimsUnanswered: 0 };
  private timer?: NodeJS.Timeout;
  private pass?: Promise<void>;
  private stopped = false;
  private lastProblem = 0;

  constructor(
    private readonly db: Queryable,
    private readonly broker: BrokerConnection,
    private readonly logger: Logger,
    private readonly options: RetryNetOptions,
  ) {}

  /** Late by more than half the grace: the original of a wait the net may have copied. */
  isLate(dueAt: number, now: number): boolean {
    return now - dueAt > this.options.graceMs / 2;
  }

  start(): void {
    this.stopped = false;
    this.schedule();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.pass;
  }

  private schedule(): void {
    if (this.stopped) return;
    const every = this.options.tickMs ?? Math.min(30_000, Math.max(1_000, this.options.graceMs / 4));
    this.timer = setTimeout(() => {
      this.pass = this.tick().then(
        () => undefined,
        (err: unknown) => this.problem('retry safety net pass failed; trying again next tick', err),
      ).finally(() => {
        this.pass = undefined;
        this.schedule();
      });
    }, every * (0.8 + Math.random() * 0.4));
    this.timer.unref();
  }

  /** One pass: finds the overdue waits, claims each and republishes its copy; returns the copies made. */
  async tick(): Promise<number> {
    if (!this.broker.isConnected) return 0;
    const { rows } = await this.db.query<OverdueRow>(OVERDUE, [
      this.options.deliveriesStream,
      this.options.graceMs,
      this.options.attemptBoundMs,
      this.options.batch ?? 500,
      this.staleMs(),
    ]);
    let copies = 0;
    for (const row of rows) {
      if (this.stopped) break;
      if (await this.rescue(row)) copies++;
    }
    return copies;
  }

  /**
   * A late original's question before its attempt: may it be delivered? False only when the net
   * holds its wait (its copy is the one delivered). PostgreSQL down or slow answers true: the net
   * cannot have claimed what it could not write, and a webhook is not held for the database.
   */
  async mayDeliver(key: WaitKey): Promise<boolean> {
    const params = [key.merchantId, key.webhookId, key.attempt, new Date(key.dueAt).toISOString()];
    const answer = (async () => {
      const inserted = await this.db.query(
        `INSERT INTO retry_claims (merchant_id, webhook_id, attempt, due_at, claimed_by) VALUES ($1, $2, $3, $4, 'original') ON CONFLICT DO NOTHING RETURNING 1 AS claimed`,
        params,
      );
      if (inserted.rows.length > 0) return true;
      // Held already: by the net (drop this one), or by this original itself, redelivered after a crash or a lost connection (deliver).
      const { rows } = await this.db.query<{ claimed_by: string }>(`SELECT claimed_by FROM retry_claims WHERE ${KEY}`, params);
      return rows[0]?.claimed_by !== 'net';
    })();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), this.options.claimTimeoutMs ?? 1_000)));
    try {
      const verdict = await Promise.race([answer, timeout]);
      if (verdict === 'timeout') throw new Error(`no answer within ${this.options.claimTimeoutMs ?? 1_000} ms`);
      if (!verdict) this.stats.originalsDropped++;
      return verdict;
    } catch (err) {
      answer.catch(() => {});
      this.stats.claimsUnanswered++;
      this.problem('late retry delivered without its claim: PostgreSQL did not answer', err, { merchantId: key.merchantId, webhookId: key.webhookId });
      return true;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Claims one overdue wait and republishes its copy; a publish that fails gives the claim back for the next pass. */
  private async rescue(row: OverdueRow): Promise<boolean> {
    const dueAt = new Date(row.next_attempt_at);
    const params = [row.merchant_id, row.webhook_id, row.attempt, dueAt.toISOString()];
    const claimed = await this.db.query(CLAIM_FOR_COPY, [...params, this.staleMs()]);
    if (claimed.rows.length === 0) return false; // its original, late, or another dispatcher's net took it
    const message = messageFromLoggedBody(row.merchant_id, row.event, row.payload);
    const fields = { merchantId: row.merchant_id, webhookId: row.webhook_id, dueAt: dueAt.toISOString(), attempt: row.attempt };
    if (message === undefined) {
      // Never expected (the log stores the body that was sent); the claim stays, so it is not tried every pass.
      this.logger.error('stranded retry cannot be republished: its logged payload has no data', fields);
      return false;
    }
    const content = Buffer.from(message);
    const headers: ScalarHeaders = {
      ...webhookHeaders(row.merchant_id, row.event, row.webhook_id, row.refs),
      [HEADERS.attempts]: row.attempt,
      [HEADERS.firstSeenAt]: new Date(row.first_seen_at).toISOString(),
      [HEADERS.dueAt]: dueAt.getTime(),
      [HEADERS.rescuedAt]: new Date().toISOString(),
    };
    if (row.last_http_status !== null) headers[HEADERS.lastStatus] = row.last_http_status;
    if (row.last_error) headers[HEADERS.lastError] = row.last_error;
    try {
      await this.broker.sendToQueue(
        this.options.dispatch,
        content,
        { persistent: true, contentType: 'application/json', messageId: row.webhook_id, headers },
        this.options.publishDeadlineMs ?? 5_000,
      );
    } catch (err) {
      await this.db.query(`DELETE FROM retry_claims WHERE ${KEY} AND claimed_by = 'net' AND copied_at IS NULL`, params).catch(() => {});
      this.problem('stranded retry not republished; the next pass tries again', err, fields);
      return false;
    }
    // Best effort: without it the claim is taken again once stale, and a second copy may go out.
    await this.db.query(`UPDATE retry_claims SET copied_at = now() WHERE ${KEY}`, params).catch(() => {});
    this.stats.copies++;
    this.logger.warn('stranded retry republished: its tier did not hand it back in time', fields);
    return true;
  }

  /** A net claim whose copy was not confirmed within this is its dead dispatcher's, and is taken again. */
  private staleMs(): number {
    return (this.options.publishDeadlineMs ?? 5_000) + this.options.graceMs;
  }

  /** Problems from a database or broker that is down: one line per 30 s, not one per webhook. */
  private problem(message: string, err: unknown, fields: Record<string, unknown> = {}): void {
    const now = Date.now();
    if (now - this.lastProblem < 30_000) return;
    this.lastProblem = now;
    this.logger.warn(message, { ...fields, error: (err as Error)?.message ?? String(err) });
  }
}
