import { createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { parseDuration } from '../config/durations.js';
import { LogUnavailableError, type Queryable } from '../delivery-store/index.js';
import { BoundedMap } from '../runtime/bounded-map.js';
import { NamedError } from '../runtime/named-error.js';

/** What a portal session may do beyond viewing; a link carries any subset (none, view only, when the dashboard names none). */
export const PORTAL_PERMISSIONS = ['resend', 'manage-endpoint', 'manage-secret'] as const;
export type PortalPermission = (typeof PORTAL_PERMISSIONS)[number];

/** A link's lifetime, and its session's: at most, and when the dashboard names none. */
export const MAX_LINK_LIFETIME_MS = 7 * 86_400_000;
export const DEFAULT_LINK_LIFETIME_MS = 3_600_000;

/** `30m`, `1h`, `7d` (a shape its caller checked) → ms; undefined past 7 days or under a second. */
export function linkLifetimeMs(text: string | undefined): number | undefined {
  const ms = text === undefined ? DEFAULT_LINK_LIFETIME_MS : parseDuration(text);
  return ms !== undefined && ms >= 1_000 && ms <= MAX_LINK_LIFETIME_MS ? ms : undefined;
}

export type PortalSession = ReturnType<typeof sessionOf>;

/** Why a link was refused; `merchantId` when a used link is presented again (its trail records the reuse). */
export class PortalLinkError extends NamedError {
  constructor(readonly reason: 'used' | 'expired' | 'unknown', readonly merchantId?: string) {
    super(reason === 'used' ? 'this portal link was already used' : reason === 'expired' ? 'this portal link has expired' : 'this portal link is not valid');
  }
}

/** Dead tokens and session ids one replica remembers (about 100 bytes each); past it the oldest is forgotten. */
export const REMEMBERED_DEAD_TOKENS = 10_000;

/** A session id or link token of ours that found nothing; `session` for a session id. */
type Dead = PortalLinkError['reason'] | 'session';

/** A session that idles this long ends, whatever its link's expiry. */
export const PORTAL_IDLE_TIMEOUT_MS = 30 * 60_000;

const digest = (secret: string) => createHash('sha256').update(secret).digest('base64url');

/**
 * `<random>.<HMAC of it>`, keyed from SECRETS_KEY on every replica: a forged token is refused before
 * any query. SECRETS_KEY_PREVIOUS still verifies during a rotation. The HMAC only saves queries: the
 * row, found by the token's digest, is what grants.
 */
export class TokenSigner {
  private readonly keys: Buffer[];

  /** Without `seed`, a random key of this process: tokens no other replica accepts. */
  constructor(seed?: Buffer, previous?: Buffer) {
    const derive = (from: Buffer) => Buffer.from(hkdfSync('sha256', from, Buffer.alloc(0), 'webhooks portal tokens', 32));
    this.keys = [derive(seed ?? randomBytes(32)), ...(previous ? [derive(previous)] : [])];
  }

  make(): string {
    const random = randomBytes(32).toString('base64url');
    return `${random}.${this.mac(this.keys[0]!, random)}`;
  }

  verify(token: string): boolean {
    const at = token.indexOf('.');
    if (at !== 43 || token.length !== 87) return false;
    const given = Buffer.from(token.slice(at + 1));
    return this.keys.some((key) => {
      const expected = Buffer.from(this.mac(key, token.slice(0, at)));
      return given.length === expected.length && timingSafeEqual(given, expected);
    });
  }

  private mac(key: Buffer, random: string): string {
    return createHmac('sha256', key).update(random).digest('base64url');
  }
}

/** The digest a session keeps of the merchant's public key (never the key itself). */
export const keyDigestOf = (publicKey: string) => digest(`public-key:${publicKey}`);

interface SessionRow {
  merchant_id: string;
  permissions: string[];
  csrf_token: string;
  expires_at: Date | string;
  link_created_at: Date | string;
  key_digest: string;
  session_hash: string;
}

const SESSION_COLUMNS = 'merchant_id, permissions, csrf_token, expires_at, link_created_at, key_digest, session_hash';

/**
 * Portal links and sessions, in the delivery log's PostgreSQL, judged by its clock. Only digests of
 * tokens and session ids are stored: a copy of the table opens no session.
 */
export class PortalSessions {
  /** Tokens this replica found dead never come back: a replay is answered without a query. */
  private readonly dead = new BoundedMap<string, Dead>(REMEMBERED_DEAD_TOKENS);

  constructor(
    private readonly db: Queryable,
    private readonly signer: TokenSigner = new TokenSigner(),
    private readonly idleTimeoutMs = PORTAL_IDLE_TIMEOUT_MS,
  ) {}

  wellFormed(token: string): boolean {
    return this.signer.verify(token);
  }

  knownDead(token: string): boolean {
    return this.dead.get(token) !== undefined;
  }

  async createLink(merchantId: string, permissions: readonly PortalPermission[], lifetimeMs: number, keyDigest: string): Promise<{ token: string; expiresAt: string }> {
    const token = this.signer.make();
    const rows = await this.run<{ expires_at: Date | string }>(
      `INSERT INTO portal_links (token_hash, merchant_id, permissions, key_digest, expires_at)
       VALUES ($1, $2, $3, $4, now() + ($5::bigint * interval '1 millisecond')) RETURNING expires_at`,
      [digest(token), merchantId, [...permissions], keyDigest, lifetimeMs],
    );
    // Links and sessions past their expiry are dead: drop them now and then, on a write.
    void this.run('DELETE FROM portal_links WHERE expires_at < now() - interval \'1 day\'', []).catch(() => {});
    void this.run('DELETE FROM portal_sessions WHERE expires_at < now()', []).catch(() => {});
    return { token, expiresAt: new Date(rows[0]!.expires_at).toISOString() };
  }

  /** The merchant a link would open now (unused, unexpired), without using it; undefined otherwise. */
  async linkMerchant(token: string): Promise<string | undefined> {
    if (!this.signer.verify(token) || this.knownDead(token)) return undefined;
    const rows = await this.run<{ merchant_id: string }>('SELECT merchant_id FROM portal_links WHERE token_hash = $1 AND redeemed_at IS NULL AND expires_at > now()', [digest(token)]);
    return rows[0]?.merchant_id;
  }

  /** A link's one use opens a session (one UPDATE: one replica wins); a second use ends what it opened. */
  async redeem(token: string): Promise<{ sessionId: string; session: PortalSession }> {
    if (!this.signer.verify(token)) throw new PortalLinkError('unknown');
    const dead = this.dead.get(token);
    if (dead) throw new PortalLinkError(dead === 'session' ? 'unknown' : dead);
    const sessionId = this.signer.make();
    const csrf = randomBytes(32).toString('base64url');
    const rows = await this.run<SessionRow>(
      `WITH used AS (
         UPDATE portal_links SET redeemed_at = now()
         WHERE token_hash = $1 AND redeemed_at IS NULL AND expires_at > now()
         RETURNING merchant_id, permissions, expires_at, created_at, key_digest)
       INSERT INTO portal_sessions (session_hash, merchant_id, link_hash, permissions, csrf_token, key_digest, link_created_at, expires_at)
       SELECT $2, merchant_id, $1, permissions, $3, key_digest, created_at, expires_at FROM used
       RETURNING ${SESSION_COLUMNS}`,
      [digest(token), digest(sessionId), csrf],
    );
    if (rows[0]) return { sessionId, session: sessionOf(rows[0]) };
    const known = await this.run<{ used: boolean; merchant_id: string }>('SELECT redeemed_at IS NOT NULL AS used, merchant_id FROM portal_links WHERE token_hash = $1', [digest(token)]);
    if (known[0]?.used) await this.run('DELETE FROM portal_sessions WHERE link_hash = $1', [digest(token)]);
    const refused = new PortalLinkError(known[0] === undefined ? 'unknown' : known[0].used ? 'used' : 'expired', known[0]?.used ? known[0].merchant_id : undefined);
    this.dead.set(token, refused.reason);
    throw refused;
  }

  /** The live session, marked as seen now; undefined when unknown, expired or idle too long. */
  async session(sessionId: string): Promise<PortalSession | undefined> {
    if (!this.signer.verify(sessionId) || this.knownDead(sessionId)) return undefined;
    const rows = await this.run<SessionRow>(
      `UPDATE portal_sessions SET last_seen_at = now()
       WHERE session_hash = $1 AND expires_at > now() AND last_seen_at > now() - $2::bigint * interval '1 millisecond'
       RETURNING ${SESSION_COLUMNS}`,
      [digest(sessionId), this.idleTimeoutMs],
    );
    if (!rows[0]) this.dead.set(sessionId, 'session');
    return rows[0] && sessionOf(rows[0]);
  }

  async end(sessionId: string): Promise<void> {
    await this.run('DELETE FROM portal_sessions WHERE session_hash = $1', [digest(sessionId)]);
    this.dead.set(sessionId, 'session');
  }

  /** The links first: one redeemed meanwhile has committed its session before the sessions' delete starts. */
  async endMerchant(merchantId: string): Promise<{ sessions: number; links: number }> {
    const links = await this.run('DELETE FROM portal_links WHERE merchant_id = $1 AND redeemed_at IS NULL RETURNING 1', [merchantId]);
    const sessions = await this.run('DELETE FROM portal_sessions WHERE merchant_id = $1 RETURNING 1', [merchantId]);
    return { sessions: sessions.length, links: links.length };
  }

  private async run<R>(text: string, params: unknown[]): Promise<R[]> {
    try {
      return (await this.db.query<R>(text, params)).rows;
    } catch (err) {
      throw new LogUnavailableError(err);
    }
  }
}

function sessionOf(row: SessionRow) {
  return {
    merchantId: row.merchant_id,
    permissions: row.permissions.filter((p): p is PortalPermission => (PORTAL_PERMISSIONS as readonly string[]).includes(p)),
    csrfToken: row.csrf_token,
    expiresAt: new Date(row.expires_at).toISOString(),
    /** When its link was minted: an operator's change after it ends the session. */
    createdAt: new Date(row.link_created_at).toISOString(),
    /** The merchant's public key's digest when the link was minted: another key now ends the session. */
    keyDigest: row.key_digest,
    /** Names the session in the audit trail: the start of its id's digest opens nothing. */
    ref: row.session_hash.slice(0, 12),
  };
}
