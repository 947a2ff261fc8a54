import type { Queryable } from '../delivery-store/index.js';
import { soleEndpoint } from './directory.js';
import type { Merchant } from './schema.js';

/**
 * The audit trail of merchant settings: who changed what, when, from where. One row per change,
 * in the merchants' PostgreSQL, written in the same transaction as the change it describes (or
 * alone, for portal links and revocations). What changed is told by field, never with a secret.
 * The table (merchant_audit) is made by libs/migrations/sql.
 *
 * Who made a change, and from which address: `admin:<token sub>`, `portal:<session>`, `cli`, or `service` (auto-disable).
 */
export interface Actor {
  actor: string;
  address?: string;
}

export interface AuditEntry {
  id: string;
  at: string;
  actor: string;
  action: string;
  changes: Record<string, unknown>;
  address: string | null;
}

type Changes = Record<string, { from: unknown; to: unknown } | 'rotated'>;

/** The fields an operator asks about; the failing clock's own bookkeeping is left out. */
export function auditChanges(before: Merchant | undefined, after: Merchant): Changes {
  const changes: Changes = {};
  const note = (field: string, from: unknown, to: unknown) => {
    if (JSON.stringify(from) !== JSON.stringify(to)) changes[field] = { from: from ?? null, to: to ?? null };
  };
  note('publicKey', before?.publicKey, after.publicKey);
  const was = before && soleEndpoint(before);
  const now = soleEndpoint(after);
  note('webhook.url', was?.url, now?.url);
  note('webhook.enabled', was?.enabled, now?.enabled);
  note('webhook.events', was?.events, now?.events);
  note('webhook.disabledReason', was?.disabledReason, now?.disabledReason);
  if (was && now && was.secret !== now.secret) changes['webhook.secret'] = 'rotated';
  return changes;
}

/** The action a set of changes is: what the trail lists first. */
export function auditAction(before: Merchant | undefined, changes: Changes): string {
  if (!before) return 'merchant.created';
  if (Object.keys(changes).length === 1 && changes['webhook.secret']) return 'secret.rotated';
  return 'merchant.updated';
}

/**
 * PostgreSQL did not write an audit entry (down, or refusing it). What the entry describes is then
 * not reported as done: in a transaction, the change it describes rolls back with it; after the
 * fact (a portal or admin action on another table, a publish), the API answers 503 in place of the
 * action's answer.
 */
export class AuditUnavailableError extends Error {
  constructor(readonly action: string, cause: unknown) {
    super(`audit entry ${action} not written: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'AuditUnavailableError';
  }
}

export async function recordAudit(db: Queryable, merchantId: string, action: string, changes: Record<string, unknown>, by: Actor): Promise<void> {
  try {
    await db.query('INSERT INTO merchant_audit (merchant_id, actor, action, changes, address) VALUES ($1, $2, $3, $4, $5)', [
      merchantId,
      by.actor,
      action,
      JSON.stringify(changes),
      by.address ?? null,
    ]);
  } catch (err) {
    throw new AuditUnavailableError(action, err);
  }
}

/**
 * The merchant's trail, newest first: `limit` entries before the entry `before` (an id) when given.
 * Ordered by the table's bigint id: a bare `id` would be the text column of the SELECT, and put
 * entry 10 after entry 9.
 */
export async function listAudit(db: Queryable, merchantId: string, limit: number, before?: string): Promise<AuditEntry[]> {
  const { rows } = await db.query<{ id: string; at: Date | string; actor: string; action: string; changes: Record<string, unknown>; address: string | null }>(
    `SELECT id::text, at, actor, action, changes, address FROM merchant_audit
     WHERE merchant_id = $1 AND ($2::bigint IS NULL OR merchant_audit.id < $2::bigint) ORDER BY merchant_audit.id DESC LIMIT $3`,
    [merchantId, before ?? null, limit],
  );
  return rows.map((row) => ({ ...row, at: new Date(row.at).toISOString() }));
}
