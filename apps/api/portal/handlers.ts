import { timingSafeEqual } from 'node:crypto';
import type { Request, Router } from 'express';
import { type Actor, disabledByOperator, type Merchant, recordAudit } from '../../../libs/merchants/index.js';
import { keyDigestOf, linkLifetimeMs, PortalLinkError, type PortalPermission, type PortalSession, type PortalSessions } from '../../../libs/portal/index.js';
import { USER_AGENT } from '../../dispatcher/program.js';
import type { ApiDeps } from '../deps.js';
import { ApiError, badRequest, notFound } from '../errors.js';
import { clientKey, INVALID_ADDRESS_KEY, take } from '../rate-limit.js';
import { listFilters, readLog } from '../log-handlers.js';
import { auditedResend, resendOne } from '../resend-routes.js';
import { mount } from '../mount.js';
import { portalSessionInput } from './routes.js';
import { mountPortalEndpoints, portalEndpointsOf } from './endpoint-handlers.js';
import { servePortalAssets } from './page.js';

/** The session cookie (`__Host-` on https). No Max-Age: it ends with the browser, the session earlier server-side. */
export const SESSION_COOKIE = 'webhooks_portal';
export const RECOVER_MAX = 1_000;

const sessionRequired = () => new ApiError(401, 'portal_session_required', 'No portal session, or it has expired: open a new portal link');

function sessionsOf(deps: ApiDeps): PortalSessions {
  if (!deps.portal.sessions) throw new ApiError(503, 'log_disabled', 'The merchant portal needs the delivery log, which is switched off here (DELIVERY_LOG=off)');
  return deps.portal.sessions;
}

/** The admin routes that mint and revoke links, on the admin router (already authenticated). */
export function mountPortalAdmin(router: Router, deps: ApiDeps): void {
  mount(router, 'createPortalSession', async (req, res, { params }) => {
    const merchantId = params.merchantId as string;
    // No body is the empty one; JSON null is a body, and no object (as bodyOf reads a settings body).
    const input = portalSessionInput.safeParse(req.body === undefined ? {} : req.body);
    if (!input.success) throw badRequest('invalid_body', `The body is not valid: ${input.error.issues[0]!.path.join('.') || 'body'} ${input.error.issues[0]!.message}`);
    const lifetime = linkLifetimeMs(input.data.expiresIn);
    if (lifetime === undefined) throw badRequest('invalid_body', 'expiresIn must be from 1s to 7d, e.g. 30m, 1h or 7d');
    // The key the link is bound to is the merchant's now, not what this replica was last told of.
    await deps.merchants.poll?.();
    const merchant = deps.merchants.byId(merchantId);
    if (!merchant) throw notFound('merchant_not_found', `No merchant ${merchantId}`);
    // Left out, a link only shows: each power it gives is asked for by name.
    const permissions = input.data.permissions ?? [];
    const link = await sessionsOf(deps).createLink(merchantId, permissions, lifetime, keyDigestOf(merchant.publicKey));
    await recordAudit(deps.audit, merchantId, 'portal.link_minted', { permissions, expiresAt: link.expiresAt }, res.locals.actor as Actor);
    deps.logger.info('portal link issued', { merchantId, permissions, expiresAt: link.expiresAt });
    // The token is in the fragment: browsers never send it to a server, a proxy log or a Referer.
    const url = `${deps.portal.baseUrl}/portal/#token=${link.token}`;
    res.status(201).json({ message: `portal link for merchant ${merchantId}`, error: null, data: { url, expiresAt: link.expiresAt } });
  }, '/admin');

  mount(router, 'revokePortalSessions', async (req, res, { params }) => {
    const merchantId = params.merchantId as string;
    const ended = await sessionsOf(deps).endMerchant(merchantId);
    await recordAudit(deps.audit, merchantId, 'portal.sessions_revoked', ended, res.locals.actor as Actor);
    deps.logger.info('portal sessions revoked', { merchantId, ...ended });
    res.json({ message: `${ended.sessions} portal session(s) and ${ended.links} unused link(s) of merchant ${merchantId} ended`, error: null, data: ended });
  }, '/admin');
}

/** Whether the merchant is gone, its key changed, or the operator turned an endpoint off since the link was minted. */
function outlived(merchant: Merchant | undefined, session: PortalSession): boolean {
  if (!merchant || keyDigestOf(merchant.publicKey) !== session.keyDigest) return true;
  return merchant.endpoints.some((endpoint) => disabledByOperator(endpoint) && Date.parse(endpoint.disabledAt ?? '') >= Date.parse(session.createdAt));
}

function cookieOf(req: Request, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const at = part.indexOf('=');
    if (at > 0 && part.slice(0, at).trim() === name) return part.slice(at + 1).trim();
  }
  return undefined;
}

function portalActor(session: PortalSession, req: Request): Actor {
  return { actor: `portal:${session.ref}`, address: req.ip };
}

/** Refuses what a browser says comes from another site: writes, a Recover round, and the link exchange (login CSRF). */
function fromPortalPage(req: Request, deps: ApiDeps): void {
  const site = req.get('sec-fetch-site');
  const origin = req.get('origin');
  if ((site !== undefined && site !== 'same-origin') || (origin !== undefined && origin !== new URL(deps.portal.baseUrl).origin)) {
    throw new ApiError(403, 'cross_origin_write', 'Portal writes come from the portal\'s own page');
  }
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The merchant portal: its page and assets, and its API under /portal/api. Never on ADMIN_PORT. */
export function mountPortal(app: Router, deps: ApiDeps): void {
  servePortalAssets(app, deps.portal.frameAncestors);

  const { hostPrefixCookie, secureCookies } = deps.portal;
  const cookieName = hostPrefixCookie ? `__Host-${SESSION_COOKIE}` : SESSION_COOKIE;
  const cookieAttributes = `${hostPrefixCookie ? 'Path=/' : 'Path=/portal'}${secureCookies ? '; Secure' : ''}; HttpOnly; SameSite=Strict`;
  const sessionId = (req: Request) => cookieOf(req, cookieName);
  /** Not counted against the client's address: a forged id is refused by its HMAC, a dead one answered from memory. */
  const session = async (req: Request): Promise<PortalSession> => {
    const id = sessionId(req);
    if (!id || id.length > 100) throw sessionRequired();
    const found = await sessionsOf(deps).session(id);
    if (!found) throw sessionRequired();
    const stale = () => outlived(deps.merchants.byId(found.merchantId), found);
    if (stale()) {
      // Ended for good, so only on what the database says: this replica may lag behind it.
      await deps.merchants.poll?.();
      if (stale()) {
        await sessionsOf(deps).end(id);
        deps.logger.info('portal session ended: the merchant changed since its link was minted', { merchantId: found.merchantId });
        throw sessionRequired();
      }
    }
    return found;
  };
  /** A write: from the portal's own page, with the session, its CSRF token and the permission the link granted. */
  const writer = async (req: Request, permission: PortalPermission | 'view'): Promise<PortalSession> => {
    fromPortalPage(req, deps);
    const found = await session(req);
    const csrf = req.get('x-csrf-token');
    if (!csrf || !sameText(csrf, found.csrfToken)) throw new ApiError(403, 'csrf_token_invalid', 'This write needs the session\'s CSRF token in x-csrf-token; reload the portal');
    if (permission !== 'view' && !found.permissions.includes(permission)) throw new ApiError(403, 'permission_denied', `This portal link does not allow ${permission}`);
    return found;
  };
  /** What a session did that changes no setting, in the merchant's audit trail too. */
  const audit = (found: PortalSession, req: Request, action: string, changes: Record<string, unknown>) =>
    recordAudit(deps.audit, found.merchantId, action, changes, portalActor(found, req));
  const sessionView = ({ merchantId, permissions, expiresAt, csrfToken }: PortalSession) => ({ merchantId, permissions, expiresAt, csrfToken });

  let warnedInvalid = false;
  /** The client address's key; a proxy writing X-Forwarded-For in a form no one reads is said once per replica. */
  const addressKey = (req: Request): string => {
    const key = clientKey(req.ip);
    if (key === INVALID_ADDRESS_KEY && !warnedInvalid) {
      warnedInvalid = true;
      deps.logger.warn('client address is no IP address: every such client shares one link-exchange budget; check TRUST_PROXY and what the proxy writes in X-Forwarded-For', { address: String(req.ip).slice(0, 100) });
    }
    return key;
  };

  /** The live session this request's cookie holds, if any: the one an exchange would replace. */
  const replaced = async (req: Request): Promise<PortalSession | undefined> =>
    session(req).catch((err: unknown) => {
      if (err instanceof ApiError && err.code === 'portal_session_required') return undefined;
      throw err;
    });

  mount(app, 'openPortalSession', async (req, res) => {
    const { token, replaceSession } = (req.body ?? {}) as { token?: unknown; replaceSession?: unknown };
    fromPortalPage(req, deps);
    if (typeof token !== 'string' || token.length === 0 || token.length > 200) throw badRequest('invalid_body', 'Give the link\'s token: {"token": "..."}');
    if (replaceSession !== undefined && typeof replaceSession !== 'boolean') throw badRequest('invalid_body', 'replaceSession is true or false');
    const sessions = sessionsOf(deps);
    // Forged, or already refused here: answered without a query, and not counted.
    if (!sessions.wellFormed(token)) throw new ApiError(401, 'portal_link_invalid', 'This portal link is not valid: ask for a new one');
    if (!sessions.knownDead(token)) await take(deps.portalLimits.address, addressKey(req), 'portal link exchanges from this address');
    // Another merchant's link over a live session may be one that merchant sent (a login CSRF): the
    // page's own same-origin POST passes fromPortalPage, so only the person's confirmation tells.
    const current = await replaced(req);
    if (current && replaceSession !== true) {
      const opens = await sessions.linkMerchant(token);
      if (opens !== undefined && opens !== current.merchantId) {
        throw new ApiError(409, 'portal_session_other_merchant', `You are signed in as ${current.merchantId}; this link opens the portal of merchant ${opens}: switch only if you meant to`);
      }
    }
    const { sessionId: id, session: started } = await sessions.redeem(token).catch(async (err: unknown) => {
      if (!(err instanceof PortalLinkError)) throw err;
      // A used link presented again ends the sessions it made: the merchant's trail says so.
      if (err.merchantId) await recordAudit(deps.audit, err.merchantId, 'portal.link_reused', { sessionsEnded: true }, { actor: 'portal', address: req.ip });
      const code = err.reason === 'used' ? 'portal_link_used' : err.reason === 'expired' ? 'portal_link_expired' : 'portal_link_invalid';
      throw new ApiError(401, code, `${err.message[0]!.toUpperCase()}${err.message.slice(1)}: ask for a new one`);
    });
    // The cookie only once the trail holds the opening: a 503 for the audit carries no session.
    await audit(started, req, 'portal.session_opened', { permissions: started.permissions });
    // Its cookie is overwritten below: ended now, not left to idle out with a copy of it still valid.
    if (current) await sessions.end(sessionId(req)!).catch(() => deps.logger.warn('portal session replaced but not ended: it idles out', { merchantId: current.merchantId }));
    res.set('set-cookie', `${cookieName}=${id}; ${cookieAttributes}`);
    deps.logger.info('portal session opened', { merchantId: started.merchantId });
    res.status(201).json({ message: 'portal session opened', error: null, data: sessionView(started) });
  });

  mount(app, 'portalLogout', async (req, res) => {
    const found = await writer(req, 'view');
    await sessionsOf(deps).end(sessionId(req)!);
    res.set('set-cookie', `${cookieName}=; ${cookieAttributes}; Max-Age=0`);
    deps.logger.info('portal session ended by logout', { merchantId: found.merchantId });
    res.json({ message: 'logged out', error: null, data: null });
  });

  mount(app, 'getPortalSession', async (req, res) => {
    const found = await session(req);
    res.json({ message: 'portal session', error: null, data: sessionView(found) });
  });

  mount(app, 'portalOverview', async (req, res) => {
    const found = await session(req);
    const health = await readLog(deps, found.merchantId, () => deps.portal.health(found.merchantId));
    const endpoints = await portalEndpointsOf(deps, found.merchantId);
    res.json({ message: 'overview', error: null, data: { merchantId: found.merchantId, endpoints, health } });
  });

  mount(app, 'portalListWebhooks', async (req, res, { query }) => {
    const found = await session(req);
    const page = await readLog(deps, found.merchantId, (log) => log.listWebhooks(found.merchantId, listFilters(query)));
    res.json({ message: `${page.webhooks.length} webhook(s)`, error: null, data: page });
  });

  mount(app, 'portalGetWebhook', async (req, res, { params }) => {
    const found = await session(req);
    const webhookId = params.webhookId as string;
    const webhook = await readLog(deps, found.merchantId, (log) => log.getWebhook(found.merchantId, webhookId));
    if (!webhook) throw notFound('webhook_not_found', `No webhook ${webhookId.slice(0, 200)} in the delivery log`);
    const at = webhook.lastAttemptAt ?? webhook.firstSeenAt;
    const headers = {
      'content-type': 'application/json',
      'user-agent': USER_AGENT,
      'webhook-id': webhook.webhookId,
      'webhook-timestamp': String(Math.floor(Date.parse(at) / 1000)),
      'webhook-signature': 'v1,<base64 HMAC-SHA256 of id.timestamp.body> (one per secret signing at the time)',
    };
    res.json({ message: `webhook ${webhookId}`, error: null, data: { ...webhook, headers } });
  });

  mount(app, 'portalResendWebhook', async (req, res, { params, query }) => {
    const found = await writer(req, 'resend');
    const merchant = deps.merchants.byId(found.merchantId);
    if (!merchant) throw new ApiError(409, 'webhook_disabled', 'This merchant has no webhook set up');
    const webhookId = params.webhookId as string;
    const endpointId = query.endpointId as string | undefined;
    await auditedResend(resendOne(deps, merchant, webhookId, endpointId), (resent) =>
      audit(found, req, 'portal.webhook_resent', endpointId === undefined ? { webhookId, resent } : { webhookId, endpointId, resent }),
    );
    deps.logger.info('webhook resent from the portal', { merchantId: found.merchantId, webhookId });
    res.json({ message: `webhook ${webhookId} sent again`, error: null, data: null });
  });

  const limited = (kind: 'settings' | 'tests' | 'recover', merchantId: string) =>
    take(deps.portalLimits[kind], merchantId, { tests: 'test events', settings: 'endpoint changes', recover: 'Recover rounds today' }[kind]);

  mount(app, 'portalRecoverPreview', async (req, res, { query }) => {
    const found = await session(req);
    // A round of Recover starts with its count, for a session that may resend. Only from the portal's own
    // page: a GET carries the SameSite=Strict cookie from any page of the same site (an <img> would spend the day).
    // Taken before the count, so that no more than the day's rounds run at once.
    const round = found.permissions.includes('resend');
    if (round) {
      fromPortalPage(req, deps);
      await limited('recover', found.merchantId);
    }
    const since = query.since as string;
    const webhooks: Array<{ webhookId: string; endpointId: string | null; event: string; references: string[]; firstSeenAt: string }> = [];
    let cursor: string | undefined;
    let truncated = false;
    try {
      // Pages of 100 within the merchant's read limits; a merchant with more than 1,000 recovers in rounds.
      do {
        const page = await readLog(deps, found.merchantId, (log) => log.listWebhooks(found.merchantId, { status: 'failed', since, cursor, limit: 100 }));
        for (const w of page.webhooks) webhooks.push({ webhookId: w.webhookId, endpointId: w.endpointId, event: w.event, references: w.references, firstSeenAt: w.firstSeenAt });
        cursor = page.nextCursor ?? undefined;
        if (webhooks.length >= RECOVER_MAX && cursor) truncated = true;
      } while (cursor && !truncated);
      // In the trail only once the count ran: a refused one was no round.
      if (round) await audit(found, req, 'portal.recover_round', { since: query.since });
    } catch (err) {
      // A count the log refused (429, 503), or whose audit entry was refused, gave the merchant nothing: the
      // round is given back. Left spent only when PostgreSQL does not take that either.
      if (round) await deps.portalLimits.recover.giveBack(found.merchantId).catch(() => {});
      throw err;
    }
    // Oldest first: a merchant's server sees them in the order they happened.
    webhooks.reverse();
    res.json({ message: `${webhooks.length} failed webhook(s) since ${since}`, error: null, data: { since, count: webhooks.length, webhooks, truncated } });
  });

  mountPortalEndpoints(app, deps, { session, writer, limited, audit, actor: portalActor });
}
