import type { Queryable } from '../delivery-store/index.js';
import type { Merchant } from './schema.js';
import { NamedError } from '../runtime/named-error.js';

/** `actor`: `admin:<token sub>`, `portal:<session>`, `cli`, or `service` (auto-disable). */
export interface Actor {
  actor: string;
  address?: string;
}

type Changes = Record<string, { from: unknown; to: unknown } | 'rotated'>;

/** Each endpoint's fields under its id (`endpoints.<ep_…>.url`); one added or removed is `endpoints.<ep_…>`. */
export function auditChanges(before: Merchant | undefined, after: Merchant): Changes {
  const changes: Changes = {};
  const note = (field: string, from: unknown, to: unknown) => {
    if (JSON.stringify(from) !== JSON.stringify(to)) changes[field] = { from: from ?? null, to: to ?? null };
  };
  note('publicKey', before?.publicKey, after.publicKey);
  const was = new Map((before?.endpoints ?? []).map((endpoint) => [endpoint.id, endpoint]));
  const now = new Map(after.endpoints.map((endpoint) => [endpoint.id, endpoint]));
  for (const id of new Set([...was.keys(), ...now.keys()])) {
    const from = was.get(id);
    const to = now.get(id);
    const field = `endpoints.${id}`;
    if (!from || !to) {
      note(field, from && { url: from.url }, to && { url: to.url });
      continue;
    }
    // disabledBy too: an operator taking over the merchant's own disable changes who may turn it on again.
    for (const key of ['url', 'description', 'enabled', 'events', 'disabledReason', 'disabledBy', 'maxPerSecond', 'orderByReference'] as const) {
      note(`${field}.${key}`, from[key], to[key]);
    }
    if (from.secret !== to.secret) changes[`${field}.secret`] = 'rotated';
  }
  return changes;
}

/** What the trail lists first; changes of one endpoint alone are that endpoint's. */
export function auditAction(before: Merchant | undefined, changes: Changes): string {
  if (!before) return 'merchant.created';
  const fields = Object.keys(changes);
  const endpoints = new Set(fields.map((field) => /^endpoints\.([^.]+)/.exec(field)?.[1]));
  if (endpoints.size !== 1 || endpoints.has(undefined)) return 'merchant.updated';
  const [id] = endpoints;
  const whole = changes[`endpoints.${id}`];
  if (whole && whole !== 'rotated') return whole.from === null ? 'endpoint.created' : 'endpoint.deleted';
  if (fields.length === 1 && changes[`endpoints.${id}.secret`]) return 'secret.rotated';
  return 'endpoint.updated';
}

/** What the entry describes is then not done: the change rolls back with it, or the API answers 503. */
export class AuditUnavailableError extends NamedError {
  constructor(readonly action: string, cause: unknown) {
    super(`audit entry ${action} not written: ${(cause as Error)?.message ?? String(cause)}`, { cause });
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
    // A value of the change's that jsonb refuses (an unpaired surrogate) is the client's, not an outage.
    if ((err as { code?: string }).code?.startsWith('22')) throw err;
    throw new AuditUnavailableError(action, err);
  }
}

/** Newest first, before the entry `before`; by the table's bigint id, not the SELECT's text `id` (10 after 9). */
export async function listAudit(db: Queryable, merchantId: string, limit: number, before?: string) {
  type Row = { id: string; at: Date | string; actor: string; action: string; changes: Record<string, unknown>; address: string | null };
  const { rows } = await db.query<Row>(
    `SELECT id::text, at, actor, action, changes, address FROM merchant_audit
     WHERE merchant_id = $1 AND ($2::bigint IS NULL OR merchant_audit.id < $2::bigint) ORDER BY merchant_audit.id DESC LIMIT $3`,
    [merchantId, before ?? null, limit],
  );
  return rows.map((row) => ({ ...row, at: new Date(row.at).toISOString() }));
}
