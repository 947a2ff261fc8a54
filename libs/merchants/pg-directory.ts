import { isDeepStrictEqual } from 'node:util';
import type { Database, Listener, Queryable } from '../delivery-store/index.js';
import type { Logger } from '../logger/index.js';
import type { MerchantDirectory } from './directory.js';
import { CHANGES_CHANNEL, columnsOf, ensureMerchantTables, MERCHANT_COLUMNS, type MerchantRow, merchantOf } from './rows.js';
import type { Merchant } from './schema.js';
import { type SecretBox, SecretsKeyError } from './secret-box.js';
import { type Actor, auditAction, auditChanges, recordAudit } from './audit.js';
import { InvalidSettingsError, PublicKeyTakenError } from './settings.js';

export interface PgDirectoryOptions {
  /** A change whose notification was lost is found by a poll this often. */
  pollIntervalMs?: number;
  /** Start-up gives up when the database stays unreachable this long (loading pages is progress, not a stall). */
  startStallMs?: number;
  /** Rows read per query while loading. */
  pageSize?: number;
}

/** PostgreSQL could not be reached for a merchant write (or a read that must be current): 503, try again. */
export class MerchantStoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`merchant database unavailable: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'MerchantStoreUnavailableError';
  }
}

/** If-Match named a version the merchant no longer has (or a merchant that does not exist). */
export class VersionMismatchError extends Error {
  constructor(readonly merchantId: string, readonly current: number | undefined) {
    super(`merchant ${merchantId} is at version ${current ?? 'none'}, not the one If-Match names`);
    this.name = 'VersionMismatchError';
  }
}

/** The Idempotency-Key was used, within its window, for a different request. */
export class IdempotencyKeyReusedError extends Error {
  constructor() {
    super('this Idempotency-Key was used for a different request');
    this.name = 'IdempotencyKeyReusedError';
  }
}

/** How long an Idempotency-Key's result is answered again (Stripe's window). */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000;

/** At start-up, how long the directory waits for an unreachable database without progress before the program gives up. */
export const MERCHANTS_START_STALL_MS = 120_000;

/** What a change function returns: the new settings, or undefined to leave the merchant as it is. */
export type SettingsChange = (current: Merchant | undefined) => Merchant | undefined;

/** A write made under an Idempotency-Key: `result` is computed after the change, and kept (sealed) with the key. */
export interface IdempotentWrite {
  key: string;
  fingerprint: string;
  result: (next: Merchant, current: Merchant | undefined) => unknown;
}

export interface WriteOptions {
  /** Compare-and-set: the write happens only at this version (0: the merchant must not exist). */
  ifVersion?: number;
  idempotency?: IdempotentWrite;
  /** Who writes, for the audit trail; the service itself (auto-disable) when absent. */
  by?: Actor;
}

export interface Written {
  merchant: Merchant;
  version: number;
  created: boolean;
  changed: boolean;
  /** The idempotent write's result: computed now, or the one recorded under its key (`replayed`). */
  result?: unknown;
  replayed: boolean;
}

interface Cached {
  merchant: Merchant;
  version: number;
}

/**
 * Merchants from PostgreSQL, held in memory so that every read is synchronous and the delivery
 * path never waits for the database. Loaded at start; a write's NOTIFY (on commit) makes every
 * program read what changed since its cursor, within a second; a poll every `pollIntervalMs` does
 * the same in case a notification was lost (the listening connection dropped). The cursor is the
 * oldest transaction still running when the program last looked (`pg_snapshot_xmin`): a change
 * is found however late its transaction commits. While PostgreSQL is down the cache keeps serving.
 */
export class PgMerchantDirectory implements MerchantDirectory {
  private readonly byIdMap = new Map<string, Cached>();
  private readonly byKeyMap = new Map<string, string>();
  private cursor?: string;
  private loaded = false;
  private stopped = false;
  private pollTimer?: NodeJS.Timeout;
  private listener?: Listener;
  private polling?: Promise<void>;
  private pollAgain = false;
  /** Merchants a NOTIFY named since the last poll: a deleted one has no row left for the poll to find. */
  private named = new Set<string>();
  private failing = false;

  constructor(
    private readonly db: Database,
    private readonly box: SecretBox,
    private readonly logger: Logger,
    private readonly options: PgDirectoryOptions = {},
  ) {}

  get ready(): boolean {
    return this.loaded;
  }

  get size(): number {
    return this.byIdMap.size;
  }

  /**
   * Loads every merchant, waiting through a database that cannot be reached yet; gives up when it
   * has stayed unreachable for `startStallMs` (or `signal` aborts).
   */
  async start(signal?: AbortSignal): Promise<void> {
    const stallMs = this.options.startStallMs ?? MERCHANTS_START_STALL_MS;
    let lastProgress = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        await ensureMerchantTables(this.db);
        await this.load(() => (lastProgress = Date.now()));
        break;
      } catch (err) {
        if (!isUnavailable(err)) throw err;
        if (signal?.aborted || Date.now() - lastProgress > stallMs) throw new MerchantStoreUnavailableError(err);
        if (attempt === 0) this.logger.warn('merchant database unreachable at start-up; waiting for it', { error: (err as Error).message, gives_up_after_ms: stallMs });
        // Not unref'd: before its servers listen, this wait is all that keeps a program (the API) alive.
        await new Promise((resolve) => setTimeout(resolve, Math.min(2_000, 200 * 2 ** attempt)));
      }
    }
    this.loaded = true;
    this.logger.info('merchant directory loaded', { merchants: this.byIdMap.size });
    void this.keepListening();
    this.pollTimer = setInterval(() => void this.poll(), this.options.pollIntervalMs ?? 30_000);
    this.pollTimer.unref();
  }

  async close(): Promise<void> {
    this.stopped = true;
    clearInterval(this.pollTimer);
    await this.listener?.close();
    await this.polling;
  }

  byId(id: string): Merchant | undefined {
    return this.byIdMap.get(id)?.merchant;
  }

  byPublicKey(publicKey: string): Merchant | undefined {
    const id = this.byKeyMap.get(publicKey);
    return id === undefined ? undefined : this.byId(id);
  }

  /** The version the cache holds (the admin API's ETag). */
  versionOf(id: string): number | undefined {
    return this.byIdMap.get(id)?.version;
  }

  list(): Merchant[] {
    return [...this.byIdMap.values()].map((cached) => cached.merchant).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /**
   * Applies `change` to the merchant's current row in one transaction (the row locked), and writes
   * the result as the next version, unless it changes nothing. Of writers racing on one merchant,
   * each sees what the one before it committed: none is lost, none applied twice. Under an
   * Idempotency-Key the result is kept with the key in the same transaction; a repeat within 24 h,
   * on any replica, gets it back and changes nothing.
   */
  async update(merchantId: string, change: SettingsChange, options: WriteOptions = {}): Promise<Written> {
    for (let attempt = 0; ; attempt++) {
      try {
        const written = await this.db.transaction((tx) => this.write(tx, merchantId, change, options));
        // What the transaction read is current: the cache takes it now, written or not (a writer
        // that lost a race sees the winner's row before its notification arrives).
        if (!written.replayed) this.apply(written.merchant, written.version);
        return written;
      } catch (err) {
        if (err instanceof Refusal) throw err.cause;
        const code = (err as { code?: string })?.code;
        const constraint = (err as { constraint?: string })?.constraint;
        if (code === '23505' && constraint === 'merchants_public_key_key') throw new PublicKeyTakenError();
        // Two writers created the merchant, or used one Idempotency-Key, at once: the loser runs
        // again on what the winner committed.
        if (code === '23505' && attempt < 2) continue;
        if (code?.startsWith('22')) throw new InvalidSettingsError('body', 'holds a value PostgreSQL cannot store (a NUL character, say)');
        if (isUnavailable(err)) throw new MerchantStoreUnavailableError(err);
        throw err;
      }
    }
  }

  private async write(tx: Queryable, merchantId: string, change: SettingsChange, { ifVersion, idempotency, by }: WriteOptions): Promise<Written> {
    if (idempotency) {
      const kept = await tx.query<{ fingerprint: string; result: string }>(
        `SELECT fingerprint, result FROM merchant_idempotency WHERE key = $1 AND created_at > now() - $2::bigint * interval '1 millisecond'`,
        [idempotency.key, IDEMPOTENCY_WINDOW_MS],
      );
      if (kept.rows[0]) {
        if (kept.rows[0].fingerprint !== idempotency.fingerprint) throw new Refusal(new IdempotencyKeyReusedError());
        const cached = this.byIdMap.get(merchantId);
        const result = JSON.parse(this.box.open(kept.rows[0].result, idempotency.key)) as unknown;
        return { merchant: cached?.merchant ?? ({ id: merchantId } as Merchant), version: cached?.version ?? 0, created: false, changed: false, result, replayed: true };
      }
    }
    const { rows } = await tx.query<MerchantRow>(`SELECT ${MERCHANT_COLUMNS} FROM merchants WHERE id = $1 FOR UPDATE`, [merchantId]);
    const row = rows[0];
    const current = row && merchantOf(row, this.box);
    const version = row ? Number(row.version) : 0;
    if (ifVersion !== undefined && ifVersion !== version) throw new Refusal(new VersionMismatchError(merchantId, row ? version : undefined));
    let next: Merchant | undefined;
    try {
      next = change(current);
    } catch (err) {
      throw new Refusal(err);
    }
    if (next === undefined || isDeepStrictEqual(next, current)) {
      if (!current) throw new Error(`no settings for merchant ${merchantId}`);
      // Nothing to record under a key either: a repeat finds nothing to change again.
      return { merchant: current, version, created: false, changed: false, result: idempotency?.result(current, current), replayed: false };
    }
    const columns = columnsOf(next, this.box);
    if (row) {
      await tx.query('UPDATE merchants SET public_key = $2, webhook = $3, secrets = $4, version = version + 1, change_xid = pg_current_xact_id(), updated_at = now() WHERE id = $1', [merchantId, ...columns]);
    } else {
      await tx.query('INSERT INTO merchants (id, public_key, webhook, secrets, version) VALUES ($1, $2, $3, $4, 1)', [merchantId, ...columns]);
    }
    const changes = auditChanges(current, next);
    if (Object.keys(changes).length > 0) await recordAudit(tx, merchantId, auditAction(current, changes), changes, by ?? { actor: 'service' });
    const result = idempotency?.result(next, current);
    if (idempotency) {
      await tx.query('DELETE FROM merchant_idempotency WHERE created_at < now() - $1::bigint * interval \'1 millisecond\'', [IDEMPOTENCY_WINDOW_MS]);
      await tx.query('INSERT INTO merchant_idempotency (key, fingerprint, result, merchant_id) VALUES ($1, $2, $3, $4)', [
        idempotency.key,
        idempotency.fingerprint,
        this.box.seal(JSON.stringify(result ?? null), idempotency.key),
        merchantId,
      ]);
    }
    await tx.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, merchantId]);
    return { merchant: next, version: version + 1, created: !row, changed: true, result, replayed: false };
  }

  /**
   * Reads every merchant, a page at a time, from a cursor taken first: nothing committed meanwhile
   * is missed. The next page is asked for before this one's secrets are opened, so that the
   * database reads while this process decrypts.
   */
  private async load(progress: () => void): Promise<void> {
    const cursor = await this.snapshotCursor();
    const pageSize = this.options.pageSize ?? 10_000;
    const page = (after: string) => this.db.query<MerchantRow>(`SELECT ${MERCHANT_COLUMNS} FROM merchants WHERE id > $1 ORDER BY id LIMIT $2`, [after, pageSize]);
    for (let next = page(''); ; ) {
      const { rows } = await next;
      if (rows.length === pageSize) {
        next = page(rows[rows.length - 1]!.id);
        next.catch(() => {}); // awaited on the next turn; unawaited only if this page throws
      }
      // A secret that does not open at start-up is a wrong SECRETS_KEY: stop, naming it, rather
      // than run without merchants whose events would then be parked as unknown.
      for (const row of rows) this.apply(merchantOf(row, this.box), Number(row.version));
      progress();
      if (rows.length < pageSize) break;
    }
    this.cursor = cursor;
  }

  private async snapshotCursor(): Promise<string> {
    const { rows } = await this.db.query<{ xmin: string }>('SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin');
    return rows[0]!.xmin;
  }

  /** Reads what changed since the cursor. Calls that come while one runs make it run once more after. */
  poll(): Promise<void> {
    if (this.stopped || !this.loaded) return Promise.resolve();
    if (this.polling) {
      this.pollAgain = true;
      return this.polling;
    }
    this.polling = (async () => {
      do {
        this.pollAgain = false;
        try {
          const cursor = await this.snapshotCursor();
          const { rows } = await this.db.query<MerchantRow>(`SELECT ${MERCHANT_COLUMNS} FROM merchants WHERE change_xid >= $1::xid8`, [this.cursor]);
          for (const row of rows) this.applyRow(row);
          this.cursor = cursor;
          await this.dropDeleted(rows);
          if (this.failing) this.logger.info('merchant database reachable again; directory current');
          this.failing = false;
        } catch (err) {
          if (!this.failing) this.logger.warn('merchant directory could not read changes; serving what it holds', { error: (err as Error).message });
          this.failing = true;
        }
      } while (this.pollAgain && !this.stopped);
    })().finally(() => (this.polling = undefined));
    return this.polling;
  }

  /** LISTEN on a connection of its own, again after each loss (then a poll: notifications meanwhile are lost). */
  private async keepListening(): Promise<void> {
    for (let attempt = 0; !this.stopped; ) {
      try {
        this.listener = await this.db.listen(CHANGES_CHANNEL, (merchantId) => {
          if (merchantId && this.named.size < 10_000) this.named.add(merchantId);
          void this.poll();
        });
        attempt = 0;
        if (this.stopped) return void (await this.listener.close());
        void this.poll();
        await this.listener.lost;
      } catch {
        // Unreachable: the poll's own warning says so; try again with a back-off.
      }
      if (this.stopped) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(5_000, 250 * 2 ** attempt++)).unref());
    }
  }

  /**
   * Forgets the merchants a NOTIFY named that have no row any more (`webhooks merchants delete`):
   * their events are then parked as unknown and their keys refused. One missed while this program
   * was not listening stays until it restarts.
   */
  private async dropDeleted(changed: readonly MerchantRow[]): Promise<void> {
    const named = [...this.named];
    // A merchant the poll just read back exists: only the others are asked about (a write's NOTIFY names one that does).
    const read = new Set(changed.map((row) => row.id));
    const held = named.filter((id) => this.byIdMap.has(id) && !read.has(id));
    // Kept until read: a poll that fails looks again at the next.
    const { rows } = held.length > 0 ? await this.db.query<{ id: string }>('SELECT id FROM merchants WHERE id = ANY($1::text[])', [held]) : { rows: [] };
    for (const id of named) this.named.delete(id);
    const present = new Set(rows.map((row) => row.id));
    for (const id of held) {
      if (present.has(id) || !this.byIdMap.has(id)) continue;
      const { merchant } = this.byIdMap.get(id)!;
      this.byIdMap.delete(id);
      if (this.byKeyMap.get(merchant.publicKey) === id) this.byKeyMap.delete(merchant.publicKey);
      this.logger.info('merchant deleted; no longer served', { merchantId: id });
    }
  }

  private applyRow(row: MerchantRow): void {
    const version = Number(row.version);
    if ((this.byIdMap.get(row.id)?.version ?? 0) >= version) return;
    try {
      this.apply(merchantOf(row, this.box), version);
    } catch (err) {
      // A secret no key opens: keep what is held, and say so (never the value).
      this.logger.error('merchant row skipped: its secrets do not open', { merchantId: row.id, error: (err as Error).message });
    }
  }

  private apply(merchant: Merchant, version: number): void {
    const held = this.byIdMap.get(merchant.id);
    if (held && held.version >= version) return;
    if (held && held.merchant.publicKey !== merchant.publicKey && this.byKeyMap.get(held.merchant.publicKey) === merchant.id) {
      this.byKeyMap.delete(held.merchant.publicKey);
    }
    this.byIdMap.set(merchant.id, { merchant, version });
    this.byKeyMap.set(merchant.publicKey, merchant.id);
  }
}

/** A write refused for what it asked (no such merchant, a stale version, …): rolled back, and thrown as it is. */
class Refusal extends Error {
  constructor(override readonly cause: unknown) {
    super('refused');
  }
}

/**
 * Connection-level trouble (refused, reset, timed out, the server shutting down): the database is
 * away, not the request wrong. pg's own errors for a lost or unobtainable connection carry no code.
 */
export function isUnavailable(err: unknown): boolean {
  const code = (err as { code?: string })?.code;
  // Ours (a key that opens nothing) and programming errors are no outage: waiting would not help.
  if (code === undefined) return err instanceof Error && !(err instanceof SecretsKeyError || err instanceof Refusal || err instanceof TypeError || err instanceof SyntaxError || err instanceof RangeError);
  return /^(08|53|57P|58)/.test(code) || ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN'].includes(code);
}
