import { createHash, randomBytes } from 'node:crypto';
import type { Queryable } from '../delivery-store/index.js';
import { LogUnavailableError } from '../delivery-store/index.js';

/** What a portal session may do beyond viewing; a link carries any subset (default all). */
export const PORTAL_PERMISSIONS = ['resend', 'manage-endpoint', 'manage-secret'] as const;
export type PortalPermission = (typeof PORTAL_PERMISSIONS)[number];

/** A link lives at most this long (and its session with it). */
export const MAX_LINK_LIFETIME_MS = 7 * 86_400_000;

export interface PortalSession {
  merchantId: string;
  permissions: PortalPermission[];
  /** Sent back by the page in x-csrf-token on every write. */
  csrfToken: string;
  expiresAt: string;
}

/** Why a link was refused: the page says which, so a merchant knows to ask for a new one. */
export class PortalLinkError extends Error {
  constructor(readonly reason: 'used' | 'expired' | 'unknown') {
    super(reason === 'used' ? 'this portal link was already used' : reason === 'expired' ? 'this portal link has expired' : 'this portal link is not valid');
    this.name = 'PortalLinkError';
  }
}

const STATEMENTS = [
  `CREATE TABLE IF NOT EXISTS portal_links (
    token_hash text PRIMARY KEY,
    merchant_id text NOT NULL,
    permissions text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    redeemed_at timestamptz
  )`,
  'CREATE INDEX IF NOT EXISTS portal_links_expiry ON portal_links (expires_at)',
  `CREATE TABLE IF NOT EXISTS portal_sessions (
    session_hash text PRIMARY KEY,
    merchant_id text NOT NULL,
    permissions text[] NOT NULL,
    csrf_token text NOT NULL,
    expires_at timestamptz NOT NULL
  )`,
  'CREATE INDEX IF NOT EXISTS portal_sessions_expiry ON portal_sessions (expires_at)',
];

const digest = (secret: string) => createHash('sha256').update(secret).digest('base64url');
const secret = () => randomBytes(32).toString('base64url');

interface SessionRow {
  merchant_id: string;
  permissions: string[];
  csrf_token: string;
  expires_at: Date | string;
}

/**
 * Portal links and sessions, in the delivery log's PostgreSQL: every API replica reads the same
 * rows, so a link minted by one is redeemed on another, and its single use is one UPDATE that only
 * one replica can win (no signing key to share, nothing kept in memory). Only digests of the link's
 * token and of the session id are stored: a copy of the table opens no session. Expiry is judged by
 * PostgreSQL's clock, the same for every replica.
 */
export class PortalSessions {
  private schema?: Promise<void>;

  constructor(private readonly db: Queryable) {}

  /** A link's token (shown once, in the URL) valid until `expiresAt`. */
  async createLink(merchantId: string, permissions: readonly PortalPermission[], lifetimeMs: number): Promise<{ token: string; expiresAt: string }> {
    await this.ready();
    const token = secret();
    const rows = await this.run<{ expires_at: Date | string }>(
      `INSERT INTO portal_links (token_hash, merchant_id, permissions, expires_at)
       VALUES ($1, $2, $3, now() + ($4::bigint * interval '1 millisecond')) RETURNING expires_at`,
      [digest(token), merchantId, [...permissions], lifetimeMs],
    );
    // Links and sessions past their expiry are dead: drop them now and then, on a write.
    void this.run('DELETE FROM portal_links WHERE expires_at < now() - interval \'1 day\'', []).catch(() => {});
    void this.run('DELETE FROM portal_sessions WHERE expires_at < now()', []).catch(() => {});
    return { token, expiresAt: new Date(rows[0]!.expires_at).toISOString() };
  }

  /** Turns a link into a session, once: of two replicas redeeming it at once, one wins. */
  async redeem(token: string): Promise<{ sessionId: string; session: PortalSession }> {
    await this.ready();
    const sessionId = secret();
    const csrf = secret();
    const rows = await this.run<SessionRow>(
      `WITH used AS (
         UPDATE portal_links SET redeemed_at = now()
         WHERE token_hash = $1 AND redeemed_at IS NULL AND expires_at > now()
         RETURNING merchant_id, permissions, expires_at)
       INSERT INTO portal_sessions (session_hash, merchant_id, permissions, csrf_token, expires_at)
       SELECT $2, merchant_id, permissions, $3, expires_at FROM used
       RETURNING merchant_id, permissions, csrf_token, expires_at`,
      [digest(token), digest(sessionId), csrf],
    );
    if (rows[0]) return { sessionId, session: sessionOf(rows[0]) };
    const known = await this.run<{ used: boolean }>('SELECT redeemed_at IS NOT NULL AS used FROM portal_links WHERE token_hash = $1', [digest(token)]);
    throw new PortalLinkError(known[0] === undefined ? 'unknown' : known[0].used ? 'used' : 'expired');
  }

  /** The live session of this cookie value; undefined when unknown or expired. */
  async session(sessionId: string): Promise<PortalSession | undefined> {
    await this.ready();
    const rows = await this.run<SessionRow>(
      'SELECT merchant_id, permissions, csrf_token, expires_at FROM portal_sessions WHERE session_hash = $1 AND expires_at > now()',
      [digest(sessionId)],
    );
    return rows[0] && sessionOf(rows[0]);
  }

  async end(sessionId: string): Promise<void> {
    await this.run('DELETE FROM portal_sessions WHERE session_hash = $1', [digest(sessionId)]);
  }

  /** Made on first use by whichever replica comes first; a failure is tried again on the next call. */
  private ready(): Promise<void> {
    this.schema ??= (async () => {
      for (const statement of STATEMENTS) await this.run(statement, []);
    })().catch((err: unknown) => {
      this.schema = undefined;
      throw err;
    });
    return this.schema;
  }

  private async run<R>(text: string, params: unknown[]): Promise<R[]> {
    try {
      return (await this.db.query<R>(text, params)).rows;
    } catch (err) {
      // Two replicas creating the tables at the same moment: the loser's statement fails once.
      if ((err as { code?: string })?.code === '23505' && text.startsWith('CREATE')) return [];
      throw new LogUnavailableError(err);
    }
  }
}

function sessionOf(row: SessionRow): PortalSession {
  return {
    merchantId: row.merchant_id,
    permissions: row.permissions.filter((p): p is PortalPermission => (PORTAL_PERMISSIONS as readonly string[]).includes(p)),
    csrfToken: row.csrf_token,
    expiresAt: new Date(row.expires_at).toISOString(),
  };
}
