import { messageFromLoggedBody } from '../contracts/index.js';
import type { Queryable } from '../delivery-store/database.js';
import { erasedMerchantSql } from '../delivery-store/erased.js';

/**
 * The failure index: one row per failed delivery (merchant, webhook, endpoint: '' before endpoints),
 * the failed message and the state of its resend. Failing again after a resend gives a later
 * `failed_at`, which frees the row for the next resend; the dispatcher's and the recorder's write of
 * one failure are one row. A resend claims rows with one conditional UPDATE (`claim_id`), renewed
 * while its copies go out; a claim whose resender died, or whose copy was not confirmed, is free
 * again one lease after its last renewal.
 */

/** How long a claim holds its rows when its resender neither marked them resent nor gave them back. */
export const CLAIM_LEASE_MS = 30_000;

/** Resends of one webhook within 24 hours; the next is refused until the first of them is a day old. */
export const RESENDS_PER_WEBHOOK_PER_DAY = 10;

/** Rows with something to send: the failed message, or the log's copy of its payload. */
const SENDABLE = `(content IS NOT NULL OR EXISTS (SELECT 1 FROM delivery_webhooks w
  WHERE w.merchant_id = failed_webhooks.merchant_id AND w.webhook_id = failed_webhooks.webhook_id AND w.payload IS NOT NULL))`;

/** One row of the index: a webhook's failure on one endpoint ('' on rows written before endpoints). */
export interface FailureKey {
  webhookId: string;
  endpointId: string;
}

export const failureKeyOf = (key: FailureKey) => `${key.webhookId}\u001f${key.endpointId}`;

/** Rows at the cap: claimed by nothing until their 24 hours are over. */
const CAPPED = `resends >= ${RESENDS_PER_WEBHOOK_PER_DAY} AND resends_since > now() - interval '24 hours'`;

/** A row's copy is in `dispatch`: resent, counted in its 24 hours. */
const MARK = `resent_at = now(),
  resends = CASE WHEN resends_since > now() - interval '24 hours' THEN resends + 1 ELSE 1 END,
  resends_since = CASE WHEN resends_since > now() - interval '24 hours' THEN resends_since ELSE now() END`;

/** The key a merchant's reference is found by in merchant_refs. */
const merchantRef = (merchantId: string, reference: string) => `${merchantId}\u001f${reference}`;

const referencesOf = (merchantId: string, keys: readonly string[]) => keys.map((key) => key.slice(merchantId.length + 1));

interface Failure {
  merchantId: string;
  webhookId: string;
  endpointId?: string;
  failedAt: Date;
  /** Which resend's copy failed (0 or absent: the webhook's own attempts): it orders failures before the clocks do. */
  resend?: number;
  event: string;
  references: string[];
  reason: string;
  attempts: number;
  lastStatus?: number;
  lastError?: string;
  content: string;
  headers: Record<string, string | number | boolean>;
}

/** A claimed row: what a resend republishes. */
export interface ClaimedFailure extends FailureKey, Pick<Failure, 'event' | 'failedAt' | 'content' | 'references'> {
  /** Its copy's x-resend (1 for the first resend). */
  resend: number;
  /** Null on a row only the recorder wrote. */
  headers: Failure['headers'] | null;
}

export interface FailureRow {
  merchantId: string;
  webhookId: string;
  /** null on a row written before endpoints. */
  endpointId: string | null;
  failedAt: string;
  event: string;
  references: string[];
  reason: string | null;
  attempts: number;
  lastStatus: number | null;
  lastError: string | null;
  resentAt: string | null;
}

/**
 * Later failures win, by the resend whose copy failed, then by failed_at (compared only within one
 * resend), and free the row for a resend; the same failure fills in the message the recorder left out.
 */
const UPSERT = `
INSERT INTO failed_webhooks AS f (merchant_id, webhook_id, failed_at, event, merchant_refs, reason, attempts, last_status, last_error, content, headers, endpoint_id, failed_resend)
SELECT $1::text, $2::text, $3::timestamptz, $4::text, $5::text[], $6::text, $7::integer, $8::integer, $9::text, $10::text, $11::jsonb, $12::text, $13::integer
-- Not for a merchant deleted meanwhile (a dispatcher that had not heard of it yet): its failure and payload stay deleted.
WHERE NOT ${erasedMerchantSql('$1::text')}
ON CONFLICT (merchant_id, webhook_id, endpoint_id) DO UPDATE SET
  failed_at = EXCLUDED.failed_at, failed_resend = EXCLUDED.failed_resend, event = EXCLUDED.event, merchant_refs = EXCLUDED.merchant_refs, reason = EXCLUDED.reason,
  attempts = EXCLUDED.attempts, last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error,
  content = EXCLUDED.content, headers = EXCLUDED.headers,
  claim_id = CASE WHEN (EXCLUDED.failed_resend, EXCLUDED.failed_at) > (f.failed_resend, f.failed_at) THEN NULL ELSE f.claim_id END,
  claimed_at = CASE WHEN (EXCLUDED.failed_resend, EXCLUDED.failed_at) > (f.failed_resend, f.failed_at) THEN NULL ELSE f.claimed_at END,
  resent_at = CASE WHEN (EXCLUDED.failed_resend, EXCLUDED.failed_at) > (f.failed_resend, f.failed_at) THEN NULL ELSE f.resent_at END
WHERE (EXCLUDED.failed_resend, EXCLUDED.failed_at) > (f.failed_resend, f.failed_at)
  OR ((EXCLUDED.failed_resend, EXCLUDED.failed_at) = (f.failed_resend, f.failed_at) AND f.content IS NULL)
`;

/** In the recorder's transaction: a `failed` record's failure, from the log's row; it replaces only an earlier failure. */
export const INDEX_FROM_LOG = `
INSERT INTO failed_webhooks AS f (merchant_id, webhook_id, endpoint_id, failed_at, failed_resend, event, merchant_refs, reason, attempts, last_status, last_error)
SELECT w.merchant_id, w.webhook_id, w.endpoint_id, r.at, r.resend, w.event, w.merchant_refs, r.reason, w.attempts, w.last_http_status, w.last_error
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::integer[]) AS r(merchant_id, webhook_id, at, reason, endpoint_id, resend)
JOIN delivery_webhooks w ON w.merchant_id = r.merchant_id AND w.webhook_id = r.webhook_id AND w.endpoint_id = r.endpoint_id
ON CONFLICT (merchant_id, webhook_id, endpoint_id) DO UPDATE SET
  failed_at = EXCLUDED.failed_at, failed_resend = EXCLUDED.failed_resend, event = EXCLUDED.event, merchant_refs = EXCLUDED.merchant_refs, reason = EXCLUDED.reason,
  attempts = EXCLUDED.attempts, last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error,
  content = NULL, headers = NULL, claim_id = NULL, claimed_at = NULL, resent_at = NULL
WHERE (EXCLUDED.failed_resend, EXCLUDED.failed_at) > (f.failed_resend, f.failed_at)
`;

/** Which of a merchant's failures a resend takes: a reference's, or one webhook's (on every endpoint, or on `endpointIds` only). */
export type FailureFilter = { reference: string } | { webhookId: string; endpointIds?: readonly string[] };

export class FailedStore {
  constructor(private readonly db: Queryable) {}

  /** The dispatcher's write, once the failed message is confirmed in `failed`. */
  async record(failure: Failure): Promise<void> {
    const { merchantId, webhookId, failedAt, event, references, reason, attempts, lastStatus, lastError, content, headers } = failure;
    await this.db.query(UPSERT, [
      merchantId, webhookId, failedAt.toISOString(), event, references.map((r) => merchantRef(merchantId, r)), reason, attempts,
      lastStatus ?? null, lastError ?? null, content, JSON.stringify(headers), failure.endpointId ?? '', failure.resend ?? 0,
    ]);
  }

  /**
   * Claims the unclaimed failures `filter` names: rows another resend holds are skipped, not waited for.
   * A copy is numbered past the resend whose failure made the row: one retention deleted and a later
   * copy's failure wrote anew starts its count at 0, and a copy numbered below would rank under it.
   */
  async claim(merchantId: string, filter: FailureFilter, claimId: string, leaseMs = CLAIM_LEASE_MS): Promise<ClaimedFailure[]> {
    const { where, params } = this.where(merchantId, filter, 3);
    type Row = Omit<ClaimedFailure, 'content'> & { content: string | null; logged: string | null };
    const { rows } = await this.db.query<Row>(
      `WITH picked AS (
         SELECT merchant_id, webhook_id, endpoint_id FROM failed_webhooks
         WHERE ${where} AND resent_at IS NULL AND (claim_id IS NULL OR claimed_at < now() - make_interval(secs => $2::double precision / 1000)) AND NOT (${CAPPED}) AND ${SENDABLE}
         ORDER BY failed_at, webhook_id, endpoint_id FOR UPDATE SKIP LOCKED
       )
       UPDATE failed_webhooks f SET claim_id = $1, claimed_at = now(), resend_count = GREATEST(f.resend_count, f.failed_resend) + 1
       FROM picked WHERE f.merchant_id = picked.merchant_id AND f.webhook_id = picked.webhook_id AND f.endpoint_id = picked.endpoint_id
       RETURNING f.webhook_id AS "webhookId", f.endpoint_id AS "endpointId", f.event, f.failed_at AS "failedAt",
         f.headers, f.merchant_refs AS "references", f.resend_count AS resend,
         f.content, CASE WHEN f.content IS NULL THEN (SELECT w.payload::text FROM delivery_webhooks w
           WHERE w.merchant_id = f.merchant_id AND w.webhook_id = f.webhook_id AND w.payload IS NOT NULL
           -- A fanned-out webhook has a log row per endpoint, each with the same body: its own endpoint's first.
           ORDER BY w.endpoint_id = f.endpoint_id DESC LIMIT 1) END AS logged`,
      [claimId, leaseMs, ...params],
    );
    return rows.flatMap(({ logged, ...r }) => {
      // A row only the recorder wrote: the log's copy of the body (SENDABLE: it has one).
      const content = r.content ?? messageFromLoggedBody(merchantId, r.event, logged ?? '');
      return content === undefined ? [] : [{ ...r, content, references: referencesOf(merchantId, r.references) }];
    });
  }

  /** After a claim won nothing, why: held by another claim, at the daily cap (each free in `ms`), or none left. */
  async whyNone(merchantId: string, filter: FailureFilter, leaseMs = CLAIM_LEASE_MS): Promise<{ kind: 'none' } | { kind: 'held' | 'capped'; ms: number }> {
    const { where, params } = this.where(merchantId, filter, 2);
    const { rows } = await this.db.query<{ open: number; capped: number; held_ms: number | null; capped_ms: number | null }>(
      `SELECT count(*) FILTER (WHERE NOT (${CAPPED}))::integer AS open, count(*) FILTER (WHERE ${CAPPED})::integer AS capped,
         max(extract(epoch FROM (claimed_at + make_interval(secs => $1::double precision / 1000) - now())) * 1000) FILTER (WHERE NOT (${CAPPED}))::double precision AS held_ms,
         min(extract(epoch FROM (resends_since + interval '24 hours' - now())) * 1000) FILTER (WHERE ${CAPPED})::double precision AS capped_ms
       FROM failed_webhooks WHERE ${where} AND resent_at IS NULL AND ${SENDABLE}`,
      [leaseMs, ...params],
    );
    const row = rows[0];
    // Open rows the claim skipped were locked by a claim not committed yet.
    if (row && row.open > 0) return { kind: 'held', ms: Math.max(1_000, Math.ceil(row.held_ms ?? 1_000)) };
    if (row && row.capped > 0) return { kind: 'capped', ms: Math.max(1_000, Math.ceil(row.capped_ms ?? 1_000)) };
    return { kind: 'none' };
  }

  /** Their copies are in `dispatch`: on `endpointId` (and '') when given, else every endpoint's row this claim holds. */
  async markResent(merchantId: string, webhookIds: readonly string[], claimId: string, endpointId?: string): Promise<void> {
    await this.db.query(
      `UPDATE failed_webhooks SET ${MARK}
       WHERE merchant_id = $1 AND webhook_id = ANY($2::text[]) AND claim_id = $3 AND resent_at IS NULL AND ($4::text IS NULL OR endpoint_id IN ($4, ''))`,
      [merchantId, webhookIds, claimId, endpointId ?? null],
    );
  }

  /** Renews this claim's lease from now; returns the keys it still holds (another resend may have taken a row whose lease ran out). */
  renew(merchantId: string, keys: readonly FailureKey[], claimId: string): Promise<Set<string>> {
    return this.updateHeld('claimed_at = now()', merchantId, keys, claimId);
  }

  /** Gives back what this claim surely did not resend, so a retry need not wait for the lease. */
  async release(merchantId: string, keys: readonly FailureKey[], claimId: string): Promise<void> {
    await this.updateHeld('claim_id = NULL, claimed_at = NULL', merchantId, keys, claimId);
  }

  /** Sets `set` on the rows `keys` name that this claim holds and has not resent; returns the keys of those. */
  private async updateHeld(set: string, merchantId: string, keys: readonly FailureKey[], claimId: string) {
    if (keys.length === 0) return new Set<string>();
    const { rows } = await this.db.query<FailureKey>(
      `UPDATE failed_webhooks SET ${set} WHERE merchant_id = $1 AND claim_id = $2 AND resent_at IS NULL
         AND (webhook_id, endpoint_id) IN (SELECT * FROM unnest($3::text[], $4::text[]))
       RETURNING webhook_id AS "webhookId", endpoint_id AS "endpointId"`,
      [merchantId, claimId, keys.map((k) => k.webhookId), keys.map((k) => k.endpointId)],
    );
    return new Set(rows.map(failureKeyOf));
  }

  /** Operators' list, newest first: a merchant's, optionally one reference's, optionally only those not resent. */
  async list(options: { merchantId?: string; reference?: string; endpointId?: string; unresolvedOnly?: boolean; since?: Date; until?: Date; limit: number }): Promise<FailureRow[]> {
    const clauses: string[] = [];
    const params: unknown[] = [];
    const param = (value: unknown) => `$${params.push(value)}`;
    if (options.merchantId !== undefined) {
      clauses.push(`merchant_id = ${param(options.merchantId)}`);
      if (options.reference !== undefined) clauses.push(`merchant_refs @> ${param([merchantRef(options.merchantId, options.reference)])}::text[]`);
    } else if (options.reference !== undefined) {
      // Any merchant's: an operator's search, not indexed.
      clauses.push(`EXISTS (SELECT 1 FROM unnest(merchant_refs) AS r WHERE split_part(r, chr(31), 2) = ${param(options.reference)})`);
    }
    if (options.endpointId !== undefined) clauses.push(`endpoint_id = ${param(options.endpointId)}`);
    if (options.unresolvedOnly) clauses.push('resent_at IS NULL');
    if (options.since) clauses.push(`failed_at >= ${param(options.since.toISOString())}`);
    if (options.until) clauses.push(`failed_at < ${param(options.until.toISOString())}`);
    const limit = param(options.limit);
    const { rows } = await this.db.query<Omit<FailureRow, 'endpointId' | 'failedAt' | 'resentAt'> & { endpointId: string; failedAt: Date; resentAt: Date | null }>(
      `SELECT merchant_id AS "merchantId", webhook_id AS "webhookId", endpoint_id AS "endpointId", failed_at AS "failedAt", event, merchant_refs AS "references",
         reason, attempts, last_status AS "lastStatus", last_error AS "lastError", resent_at AS "resentAt" FROM failed_webhooks
       ${clauses.length ? `WHERE ${clauses.join(' AND ')}` : ''} ORDER BY failed_at DESC, webhook_id DESC, endpoint_id DESC LIMIT ${limit}`,
      params,
    );
    return rows.map((r) => ({
      ...r,
      endpointId: r.endpointId === '' ? null : r.endpointId,
      failedAt: r.failedAt.toISOString(),
      references: referencesOf(r.merchantId, r.references),
      resentAt: r.resentAt?.toISOString() ?? null,
    }));
  }

  private where(merchantId: string, filter: FailureFilter, first: number): { where: string; params: unknown[] } {
    if ('reference' in filter) return { where: `merchant_refs @> $${first}::text[]`, params: [[merchantRef(merchantId, filter.reference)]] };
    return {
      where: `merchant_id = $${first} AND webhook_id = $${first + 1} AND ($${first + 2}::text[] IS NULL OR endpoint_id = ANY($${first + 2}::text[]))`,
      params: [merchantId, filter.webhookId, filter.endpointIds ?? null],
    };
  }
}
