import { isDeepStrictEqual } from 'node:util';
import type { Queryable } from '../delivery-store/index.js';
import { type Actor, auditAction, auditChanges, recordAudit } from './audit.js';
import { withoutEndedGrace } from './directory.js';
import { dropEndpointRates, respaceForLimit } from './endpoint-rate.js';
import { clearHealth, type Health, HEALTH_COLUMNS, type HealthRow, healthOf, withHealth } from './health.js';
import { CHANGES_CHANNEL, columnsOf, idDigest, MERCHANT_COLUMNS, type MerchantRow, merchantOf } from './rows.js';
import { disabledByOperator, type Merchant } from './schema.js';
import type { SecretBox } from './secret-box.js';
import { NamedError } from '../runtime/named-error.js';

export class VersionMismatchError extends NamedError {
  constructor(readonly merchantId: string, readonly current: number | undefined) {
    super(`merchant ${merchantId} is at version ${current ?? 'none'}, not the one If-Match names`);
  }
}

export class IdempotencyKeyReusedError extends NamedError {
  constructor() {
    super('this Idempotency-Key was used for a different request');
  }
}

/** Stripe's window. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000;

/** The new settings, or undefined to leave the merchant as it is; `now` is PostgreSQL's time of the write. */
export type SettingsChange = (current: Merchant | undefined, now: Date) => Merchant | undefined;

/** `result` is computed after the change, and kept (sealed) with the key. */
interface IdempotentWrite {
  key: string;
  fingerprint: string;
  result: (next: Merchant, current: Merchant | undefined) => unknown;
}

export interface WriteOptions {
  /** 0: the merchant must not exist; '*': it must, at any version. */
  ifVersion?: number | '*';
  idempotency?: IdempotentWrite;
  /** The service itself (auto-disable) when absent. */
  by?: Actor;
}

/** The merchant as a write left it, under its row's lock, so current, whatever the outcome (`row`: sealed). */
export interface Held {
  merchant: Merchant;
  version: number;
  row: MerchantRow;
}

export interface Written extends Omit<Held, 'row'> {
  created: boolean;
  changed: boolean;
  /** Computed now, or the one recorded under its key (`replayed`). */
  result?: unknown;
  replayed: boolean;
  clockCleared?: string[];
  held?: Held;
}

/** A write refused for what it asked: rolled back, and thrown as it is, with the row it was refused on. */
export class Refusal extends Error {
  constructor(
    override readonly cause: unknown,
    readonly held?: Held,
  ) {
    super('refused');
  }
}

/** On the locked row; a merchant made where a tombstone is goes on from its version (no cache takes it for old). */
export async function writeMerchant(
  tx: Queryable,
  box: SecretBox,
  merchantId: string,
  change: SettingsChange,
  { ifVersion, idempotency, by }: WriteOptions,
): Promise<Written> {
  // The clocks read after the row is locked, in a statement of their own: its snapshot is newer than the lock wait.
  const { rows } = await tx.query<MerchantRow & { now: Date }>(
    `SELECT ${MERCHANT_COLUMNS}, now() AS now FROM merchants WHERE id = $1 FOR UPDATE`,
    [merchantId],
  );
  const { rows: health } = await tx.query<HealthRow & { now: Date }>(
    `SELECT ${HEALTH_COLUMNS}, now() AS now FROM endpoint_health WHERE merchant_id = $1 AND failing_since IS NOT NULL`,
    [merchantId],
  );
  // PostgreSQL's time, by which the change judges clocks and stamps a grace.
  const now = new Date((rows[0] ?? health[0])?.now ?? (await tx.query<{ now: Date }>('SELECT now() AS now')).rows[0]!.now);
  const row = rows[0];
  const clocks = health.map(healthOf).filter((clock): clock is Health => clock !== undefined);
  const current = row && withHealth(merchantOf(row, box), clocks);
  const version = row ? Number(row.version) : 0;
  const held = row && current && { merchant: current, version, row };
  // Looked up only now that the row is ours: a repeat sent while the first call held it finds its key.
  if (idempotency) {
    const kept = await tx.query<{ fingerprint: string; result: string; version: string | null }>(
      `SELECT fingerprint, result, version FROM merchant_idempotency WHERE key = $1 AND created_at > now() - $2::bigint * interval '1 millisecond'`,
      [idempotency.key, IDEMPOTENCY_WINDOW_MS],
    );
    if (kept.rows[0]) {
      if (kept.rows[0].fingerprint !== idempotency.fingerprint) throw new Refusal(new IdempotencyKeyReusedError(), held);
      const result = JSON.parse(box.open(kept.rows[0].result, idempotency.key)) as unknown;
      // The first answer's version for its ETag; a key kept without one, the merchant's now.
      const first = Number(kept.rows[0].version ?? version);
      return { merchant: current ?? ({ id: merchantId } as Merchant), version: first, created: false, changed: false, result, replayed: true, held };
    }
  }
  if (ifVersion === '*' ? !row : ifVersion !== undefined && ifVersion !== version) throw new Refusal(new VersionMismatchError(merchantId, row ? version : undefined), held);
  let next: Merchant | undefined;
  try {
    next = change(current, now);
  } catch (err) {
    throw new Refusal(err, held);
  }
  if (next === undefined || isDeepStrictEqual(next, current)) {
    if (!current) throw new Error(`no settings for merchant ${merchantId}`);
    // Its key is kept all the same: a repeat after another write must get this answer.
    const result = idempotency?.result(current, current);
    if (idempotency) await keep(tx, box, idempotency, result, merchantId, version);
    return { merchant: current, version, created: false, changed: false, result, replayed: false, held };
  }
  // A replaced secret whose grace has ended (by PostgreSQL's clock) is dropped by any write that changes something.
  next = withoutEndedGrace(next, now);
  const columns = columnsOf(next, box);
  const before = new Map((current?.endpoints ?? []).map((endpoint) => [endpoint.id, endpoint]));
  let written = version + 1;
  const running = new Set(next.endpoints.filter((endpoint) => endpoint.failingSince).map((endpoint) => endpoint.id));
  const cleared = [...before.values()].filter((endpoint) => endpoint.failingSince && !running.has(endpoint.id)).map((endpoint) => endpoint.id);
  const clockCleared = cleared.length > 0 ? cleared : undefined;
  if (row) {
    await tx.query('UPDATE merchants SET public_key = $2, endpoints = $3, secrets = $4, version = version + 1, change_xid = pg_current_xact_id(), updated_at = now() WHERE id = $1', [merchantId, ...columns]);
    if (clockCleared) await clearHealth(tx, merchantId, clockCleared);
    for (const endpoint of next.endpoints) {
      const was = before.get(endpoint.id);
      if (was && was.maxPerSecond !== endpoint.maxPerSecond) await respaceForLimit(tx, merchantId, endpoint.id, was.maxPerSecond, endpoint.maxPerSecond);
    }
    const deleted = [...before.keys()].filter((id) => !next!.endpoints.some((e) => e.id === id));
    if (deleted.length > 0) await dropEndpointRates(tx, merchantId, deleted);
  } else {
    // Kept: it tells the deleted merchant's records from this one's. Locked: a delete's sweep waits for this write.
    const { rows: buried } = await tx.query<{ version: string }>('SELECT version FROM merchant_tombstones WHERE id_digest = $1 FOR UPDATE', [idDigest(merchantId)]);
    written = Number(buried[0]?.version ?? 0) + 1;
    await tx.query('INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3, $4, $5)', [merchantId, ...columns, written]);
  }
  // The operator turning an endpoint off ends the merchant's portal sessions (docs/portal.md), with the write.
  if (next.endpoints.some((e) => before.has(e.id) && !disabledByOperator(before.get(e.id)) && disabledByOperator(e))) {
    await tx.query('DELETE FROM portal_sessions WHERE merchant_id = $1', [merchantId]);
  }
  const changes = auditChanges(current, next);
  if (Object.keys(changes).length > 0) await recordAudit(tx, merchantId, auditAction(current, changes), changes, by ?? { actor: 'service' });
  const result = idempotency?.result(next, current);
  if (idempotency) await keep(tx, box, idempotency, result, merchantId, written);
  await tx.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, merchantId]);
  const stored: MerchantRow = { id: merchantId, public_key: columns[0], endpoints: JSON.parse(columns[1]), secrets: columns[2], version: written };
  return { merchant: next, version: written, created: !row, changed: true, result, replayed: false, clockCleared, held: { merchant: next, version: written, row: stored } };
}

/** The answer under its key (sealed: it may show a secret); keys past the window go. */
async function keep(tx: Queryable, box: SecretBox, idempotency: IdempotentWrite, result: unknown, merchantId: string, version: number): Promise<void> {
  await tx.query('DELETE FROM merchant_idempotency WHERE created_at < now() - $1::bigint * interval \'1 millisecond\'', [IDEMPOTENCY_WINDOW_MS]);
  await tx.query('INSERT INTO merchant_idempotency (key, fingerprint, result, merchant_id, version) VALUES ($1, $2, $3, $4, $5)', [
    idempotency.key,
    idempotency.fingerprint,
    box.seal(JSON.stringify(result ?? null), idempotency.key),
    merchantId,
    version,
  ]);
}
