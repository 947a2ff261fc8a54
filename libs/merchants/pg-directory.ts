import { performance } from 'node:perf_hooks';
import { type Database, isTransient, keepListening, type Listening } from '../delivery-store/index.js';
import type { Logger } from '../logger/index.js';
import { DirectoryCache } from './cache.js';
import type { MerchantDirectory } from './directory.js';
import { HEALTH_COLUMNS, type HealthFact, type HealthRow, healthOf, writeHealth } from './health.js';
import { CHANGES_CHANNEL, MERCHANT_COLUMNS, type MerchantRow, merchantOf, sealedSecretsOf, TOMBSTONE_KEEP_MS } from './rows.js';
import { keyIdOf, type SecretBox, SecretsKeyError } from './secret-box.js';
import { InvalidSettingsError, PublicKeyTakenError } from './errors.js';
import { Periodic } from '../runtime/periodic.js';
import { StartOnce } from '../runtime/start-once.js';
import { AuditUnavailableError } from './audit.js';
import { type Held, Refusal, type SettingsChange, type WriteOptions, type Written, writeMerchant } from './write.js';
import { NamedError } from '../runtime/named-error.js';

export interface PgDirectoryOptions {
  pollIntervalMs?: number;
  /** Start-up gives up when the database stays unreachable this long (loading pages is progress, not a stall). */
  startStallMs?: number;
  /** false: a secret is opened only when read (the API, which never signs); a row no key opens is still found at once. */
  openSecrets?: boolean;
}

/** PostgreSQL could not be reached for a merchant write (or a read that must be current): 503, try again. */
export class MerchantStoreUnavailableError extends NamedError {
  constructor(cause: unknown) {
    super(`merchant database unavailable: ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }
}

/** A tombstone's deleted_at in ms since the epoch, judged by PostgreSQL's clock (clock()). */
const DELETED_MS = '(extract(epoch FROM deleted_at) * 1000)::float8 AS deleted_ms';

/** The poll that finds a change whose notification was lost. */
export const DEFAULT_POLL_INTERVAL_MS = 10_000;

export const MERCHANTS_START_STALL_MS = 120_000;

/** A cursor alone is not enough: after a restore or a failover the transaction ids go back. */
interface Position {
  cursor: string;
  history: string;
}

/** The position, and PostgreSQL's clock when it was read (ms since the epoch). */
const POSITION_NOW = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS cursor,
    (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now_ms,
    concat_ws('/',
      (SELECT system_identifier FROM pg_control_system()),
      (SELECT timeline_id FROM pg_control_checkpoint()),
      pg_postmaster_start_time(),
      (SELECT oid FROM pg_database WHERE datname = current_database()),
      'merchants'::regclass::oid) AS history`;

/** Served from memory; a NOTIFY, or a poll, reads changes since the oldest transaction running at the last look. */
export class PgMerchantDirectory extends DirectoryCache implements MerchantDirectory {
  private position?: Position;
  private pgTime?: { ms: number; at: number };
  private polledAt = 0;
  private loaded = false;
  private stopped = false;
  private readonly starting = new StartOnce();
  private readonly polls = new Periodic(() => this.poll(), () => this.options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS, { waitFirst: true });
  private listening?: Listening;
  private polling?: Promise<void>;
  private pollAgain = false;
  private failing = false;
  /** Set when the LISTEN connection was lost and made again: the next poll loads every merchant. */
  private reloadNext = false;
  /** The merchants this replica wrote while a load read its pages: their versions may be past the pages'. */
  private writtenDuringLoad?: Set<string>;
  reloads = 0;

  constructor(
    private readonly db: Database,
    private readonly box: SecretBox,
    private readonly logger: Logger,
    private readonly options: PgDirectoryOptions = {},
  ) {
    super();
  }

  /** Merchants whose newest row is sealed with a key this program lacks: it serves their last readable version. */
  get unreadable(): Array<{ merchantId: string; version: number; keyId: string | undefined }> {
    return [...this.unread].map(([merchantId, { version, keyId }]) => ({ merchantId, version, keyId }));
  }

  /** Loads every merchant, waiting at most `startStallMs` without progress; safe twice, a no-op once closed. */
  start(signal?: AbortSignal): Promise<void> {
    return this.starting.run(() => this.firstLoad(signal));
  }

  private async firstLoad(signal?: AbortSignal): Promise<void> {
    if (this.stopped) return;
    const stallMs = this.options.startStallMs ?? MERCHANTS_START_STALL_MS;
    let lastProgress = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        await this.load(() => (lastProgress = Date.now()), true);
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
    this.logger.info('merchant directory loaded', { merchants: this.size });
    if (this.stopped) return;
    // Notifications lost while the LISTEN is away are found by the poll made after each (re)start; after a
    // loss, by a load: a crash gives the ids of transactions whose WAL it lost again, below the cursor.
    let listened = false;
    this.listening = keepListening(this.db, CHANGES_CHANNEL, {
      heard: () => void this.poll(),
      connected: () => {
        if (listened) this.reloadNext = true;
        listened = true;
        void this.poll();
      },
    });
    void this.polls.start();
  }

  async close(): Promise<void> {
    this.stopped = true;
    void this.polls.stop();
    await this.listening?.stop();
    await this.polling;
  }

  /** By PostgreSQL's clock (clock()). */
  override deleted(id: string, now = () => this.clock().getTime()): boolean {
    return super.deleted(id, now);
  }

  /** PostgreSQL's clock as last read plus the time since on this host's monotonic clock, never its wall clock. */
  clock(): Date {
    return this.pgTime ? new Date(this.pgTime.ms + (performance.now() - this.pgTime.at)) : new Date();
  }

  /** PostgreSQL's clock is read with it, taken as of the middle of the round trip. */
  private async positionNow(): Promise<Position> {
    const asked = performance.now();
    const { rows } = await this.db.query<Position & { now_ms: number }>(POSITION_NOW);
    const { now_ms, ...position } = rows[0]!;
    this.pgTime = { ms: Number(now_ms), at: (asked + performance.now()) / 2 };
    return position;
  }

  /** Applies `change` to the locked row as the next version: of racing writers, none is lost, none applied twice. */
  async update(merchantId: string, change: SettingsChange, options: WriteOptions = {}): Promise<Written> {
    for (let attempt = 0; ; attempt++) {
      try {
        const written = await this.db.transaction((tx) => writeMerchant(tx, this.box, merchantId, change, options));
        // Taken before the notification, so a 412's next GET answers the version to send.
        if (written.held) this.hold(written.held);
        for (const endpointId of written.clockCleared ?? []) this.setHealth(merchantId, endpointId, undefined);
        return written;
      } catch (err) {
        if (err instanceof Refusal) {
          if (err.held) this.hold(err.held);
          throw err.cause;
        }
        // The change rolled back with its audit entry: say that, not that the database is down.
        if (err instanceof AuditUnavailableError) throw err;
        const code = (err as { code?: string })?.code;
        const constraint = (err as { constraint?: string })?.constraint;
        if (code === '23505' && constraint === 'merchants_public_key_key') throw new PublicKeyTakenError();
        // Two writers created the merchant, or used one Idempotency-Key, at once: the loser runs again.
        if (code === '23505' && attempt < 2) continue;
        if (code?.startsWith('22')) throw new InvalidSettingsError('body', 'holds a value PostgreSQL cannot store (a NUL character, say)');
        if (isUnavailable(err)) throw new MerchantStoreUnavailableError(err);
        throw err;
      }
    }
  }

  /** What a write left, its secrets unopened where this program opens none. */
  private hold({ merchant, version, row }: Held): void {
    this.writtenDuringLoad?.add(merchant.id);
    this.apply(this.options.openSecrets === false ? merchantOf(row, this.box, false) : merchant, version);
  }

  /** Applies a dispatcher's fact to the failing clock of the endpoint at `url` (see writeHealth). */
  async recordHealth(merchantId: string, url: string, fact: HealthFact) {
    const written = await this.db.transaction(async (tx) => {
      const result = await writeHealth(tx, merchantId, url, fact);
      if (result?.wrote) await tx.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, merchantId]);
      return result;
    }).catch((err: unknown) => {
      throw isUnavailable(err) ? new MerchantStoreUnavailableError(err) : err;
    });
    if (written) this.setHealth(merchantId, written.endpointId, written.clock);
    return written;
  }

  /** From a position taken first: nothing committed meanwhile is missed. `strict`: a row no key opens throws. */
  private async load(progress: () => void, strict: boolean): Promise<void> {
    const written = (this.writtenDuringLoad = new Set());
    try {
      await this.loadInto(new DirectoryCache(), progress, strict, written);
    } finally {
      this.writtenDuringLoad = undefined;
    }
  }

  private async loadInto(cache: DirectoryCache, progress: () => void, strict: boolean, written: ReadonlySet<string>): Promise<void> {
    const position = await this.positionNow();
    const pageSize = 10_000;
    const page = (after: string) => this.db.query<MerchantRow>(`SELECT ${MERCHANT_COLUMNS} FROM merchants WHERE id > $1 ORDER BY id LIMIT $2`, [after, pageSize]);
    for (let next = page(''); ; ) {
      const { rows } = await next;
      if (rows.length === pageSize) {
        next = page(rows[rows.length - 1]!.id);
        next.catch(() => {}); // awaited on the next turn; unawaited only if this page throws
      }
      for (const row of rows) this.take(cache, row, strict);
      progress();
      if (rows.length < pageSize) break;
    }
    const { rows: clocks } = await this.db.query<HealthRow>(`SELECT ${HEALTH_COLUMNS} FROM endpoint_health WHERE failing_since IS NOT NULL`);
    for (const row of clocks) cache.setHealth(row.merchant_id, row.endpoint_id, healthOf(row));
    // Deleted merchants of the last day: their webhooks still queued are dropped, not parked.
    const { rows: tombstones } = await this.db.query<{ id_digest: string; deleted_ms: number }>(
      `SELECT id_digest, ${DELETED_MS} FROM merchant_tombstones WHERE deleted_at > now() - $1::bigint * interval '1 millisecond'`,
      [TOMBSTONE_KEEP_MS],
    );
    for (const { id_digest, deleted_ms } of tombstones) cache.bury(id_digest, deleted_ms);
    // A write answered meanwhile is not undone by a page read before it: the version never goes back.
    for (const id of written) cache.keepFrom(this, id);
    Object.assign(this, cache);
    this.position = position;
    this.polledAt = performance.now();
  }

  /** Takes a row into `cache`; one no key of this program opens is reported, the version held kept. */
  private take(cache: DirectoryCache, row: MerchantRow, strict: boolean): void {
    try {
      if (this.options.openSecrets === false && row.secrets && !this.box.holdsKeyOf(row.secrets)) throw new SecretsKeyError(keyIdOf(row.secrets), sealedSecretsOf(row));
      cache.apply(merchantOf(row, this.box, this.options.openSecrets !== false), Number(row.version));
      return;
    } catch (err) {
      if (strict || !(err instanceof SecretsKeyError)) throw err;
    }
    const keyId = row.secrets ? keyIdOf(row.secrets) : undefined;
    if (cache.markUnreadable(row.id, Number(row.version), keyId)) {
      this.logger.error('merchant row sealed with a key this program lacks (SECRETS_KEY, SECRETS_KEY_PREVIOUS): serving its last readable version', {
        merchantId: row.id,
        version: Number(row.version),
        keyId,
        servedVersion: cache.versionOf(row.id) ?? null,
      });
    }
    cache.keepFrom(this, row.id);
  }

  /** Calls while one runs make it run once more after. */
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
          await this.readChanges();
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

  private async readChanges(): Promise<void> {
    const position = await this.positionNow();
    const held = this.position!;
    const reason = this.reloadNext
      ? 'the listening connection was lost: PostgreSQL may have restarted in place after a crash'
      : held.history !== position.history
        ? 'the database is another one, or restored, failed over or restarted'
        : BigInt(position.cursor) < BigInt(held.cursor)
          ? 'transaction ids went back'
          : performance.now() - this.polledAt > TOMBSTONE_KEEP_MS / 2
            ? 'no change read for half a day'
            : undefined;
    if (reason) {
      this.logger.info('merchant directory loads every merchant again', { reason });
      const forced = this.reloadNext;
      this.reloadNext = false;
      await this.load(() => {}, false).catch((err: unknown) => {
        this.reloadNext ||= forced;
        throw err;
      });
      this.reloads++;
      return;
    }
    const since = [held.cursor];
    const [{ rows }, { rows: tombstones }, { rows: clocks }] = await Promise.all([
      this.db.query<MerchantRow>(`SELECT ${MERCHANT_COLUMNS} FROM merchants WHERE change_xid >= $1::xid8`, since),
      this.db.query<{ id_digest: string; version: string; deleted_ms: number }>(`SELECT id_digest, version, ${DELETED_MS} FROM merchant_tombstones WHERE change_xid >= $1::xid8`, since),
      this.db.query<HealthRow>(`SELECT ${HEALTH_COLUMNS} FROM endpoint_health WHERE change_xid >= $1::xid8`, since),
    ]);
    for (const row of rows) {
      if ((this.versionOf(row.id) ?? 0) < Number(row.version)) this.take(this, row, false);
    }
    if (tombstones.length > 0) {
      const digests = this.digests();
      for (const tombstone of tombstones) {
        this.bury(tombstone.id_digest, tombstone.deleted_ms);
        const id = digests.get(tombstone.id_digest);
        if (id !== undefined && this.drop(id, Number(tombstone.version))) this.logger.info('merchant deleted; no longer served', { merchantId: id });
      }
      this.forgetExpired(this.clock().getTime());
    }
    for (const row of clocks) this.setHealth(row.merchant_id, row.endpoint_id, healthOf(row));
    this.position = position;
    this.polledAt = performance.now();
  }
}

/** The database is away or busy, not the request wrong: waiting would help. */
export function isUnavailable(err: unknown): boolean {
  if (err instanceof SecretsKeyError || err instanceof Refusal || err instanceof TypeError || err instanceof SyntaxError || err instanceof RangeError) return false;
  return isTransient(err);
}
