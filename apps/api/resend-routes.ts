import type { NextFunction, Request, Response, Router } from 'express';
import { isWellFormedReference } from '../../libs/contracts/index.js';
import { ResendStoppedError } from '../../libs/failed/index.js';
import { type Merchant, recordAudit } from '../../libs/merchants/index.js';
import { METRIC_NAMES, zeroedCounter } from '../../libs/metrics/index.js';
import type { ApiDeps } from './deps.js';
import { badRequest, unavailable } from './errors.js';
import { take } from './rate-limit.js';
import { mount, undecodableQuery, unknownParameter } from './mount.js';

/** The merchant's resends, by reference and by webhook id, both counted by status. */
export function mountResends(app: Router, deps: ApiDeps): void {
  // The answers a resend can get, at 0 from start-up: the dashboard's panel reads 0, not "No data".
  const statuses = ['200', '400', '401', '403', '404', '409', '429', '503'];
  const resends = zeroedCounter(deps.registry, METRIC_NAMES.resends, 'Resend API answers by HTTP status', 'status', statuses);
  const countResends = (req: Request, res: Response, next: NextFunction) => {
    if (req.method === 'POST') res.on('finish', () => resends.inc({ status: String(res.statusCode) }));
    next();
  };

  // The resend of one webhook by id (the portal's Resend and Recover call it) is a resend as well.
  app.use(['/nucleus/tnx/webhook', /^\/nucleus\/webhooks\/[^/]+\/resend$/], countResends);
  mount(app, 'resendWebhook', async (req, res) => {
    const reference = referenceFrom(req);
    const merchant = await deps.auth.authenticate(req.get('x-auth-token'), req.get('authorization'));
    await mayResend(deps, merchant);
    await auditedResend(deps.resend.resend(merchant, reference), (resent) => auditMerchantResend(deps, req, merchant.id, { reference, resent }));
    res.status(200).json({ message: `webhook sent for reference ${reference}`, error: null, data: null });
  }, '', true);

  mount(app, 'resendWebhookById', async (req, res, { params: { webhookId }, query: { endpointId } }) => {
    const merchant = await deps.auth.authenticate(req.get('x-auth-token'), req.get('authorization'));
    await auditedResend(resendOne(deps, merchant, webhookId, endpointId), (resent) =>
      auditMerchantResend(deps, req, merchant.id, endpointId === undefined ? { webhookId, resent } : { webhookId, endpointId, resent }),
    );
    res.status(200).json({ message: `webhook ${webhookId} sent again`, error: null, data: null });
  });
}

/** Every resend, the API's and the portal's: the merchant's resend budget, and a broker to send on. */
async function mayResend(deps: ApiDeps, merchant: Merchant): Promise<void> {
  await take(deps.limiter, merchant.id);
  if (!deps.brokerConnected()) throw unavailable('The message broker is unavailable; try again shortly');
}

/** Resends one failed webhook of the merchant, on every endpoint where it failed or on `endpointId` alone. */
export async function resendOne(deps: ApiDeps, merchant: Merchant, webhookId: string, endpointId?: string): Promise<number> {
  await mayResend(deps, merchant);
  return deps.resend.resendWebhook(merchant, webhookId, endpointId);
}

/** Audits what `resending` sent: also the copies a resend stopped midway (ResendStoppedError) sent. */
export async function auditedResend(resending: Promise<number>, audit: (resent: number) => Promise<void>): Promise<void> {
  const resent = await resending.catch(async (err: unknown) => {
    if (err instanceof ResendStoppedError && err.sent > 0) await audit(err.sent);
    throw err;
  });
  await audit(resent);
}

/** Written after the copies went out: a failed write is logged, and does not turn a resend that happened into an error. */
async function auditMerchantResend(deps: ApiDeps, req: Request, merchantId: string, changes: Record<string, unknown>): Promise<void> {
  await recordAudit(deps.audit, merchantId, 'webhook.resent', changes, { actor: 'merchant-api', address: req.ip }).catch((err: unknown) =>
    deps.logger.warn('resend not written to the audit trail', { merchantId, error: (err as Error)?.message }),
  );
}

function referenceFrom(req: Request): string {
  const query = req.query as Record<string, unknown>;
  const unknown = Object.keys(query).filter((k) => k !== 'reference');
  if (unknown.length > 0) throw unknownParameter(unknown[0]!);
  const reference = query.reference;
  if (reference === undefined || reference === '') throw badRequest('missing_reference', 'The reference query parameter is required');
  if (typeof reference !== 'string') throw badRequest('invalid_reference', 'Give the reference query parameter once');
  if (undecodableQuery(req.originalUrl) !== undefined) throw badRequest('invalid_reference', 'The reference is not valid percent-encoded UTF-8');
  if (!isWellFormedReference(reference)) {
    throw badRequest('invalid_reference', 'The reference must be 1 to 200 characters without control characters or a lone surrogate');
  }
  return reference;
}
