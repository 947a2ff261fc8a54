import express, { type NextFunction, type Request, type Response } from 'express';
import {
  DirectoryNotReadyError,
  InvalidSettingsError,
  MerchantNotFoundError,
  type MerchantDirectory,
  type MerchantSettings,
  PublicKeyTakenError,
  WebhookNotSetUpError,
  firstIssue,
  merchantInputSchema,
  rotateInputSchema,
  viewOf,
} from '../../libs/merchants/index.js';
import type { Logger } from '../../libs/logger/index.js';
import type { Authenticator } from './auth.js';
import { ApiError, badRequest, notFound, unavailable } from './errors.js';

export interface AdminDeps {
  auth: Authenticator;
  /** Every directory can be read. */
  merchants: MerchantDirectory;
  /** Only the broker directory can be written (MERCHANT_DIRECTORY=broker). */
  settings?: MerchantSettings;
  /** False while the directory is still reading the merchants stream: a 404 then would be a lie. */
  ready?: () => boolean;
  logger: Logger;
}

const MERCHANT_ID = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$/;

/**
 * The admin API for the dashboard's backend: a merchant's webhook settings, created, read, and its
 * secret rotated. Bearer JWT with the webhooks:admin scope; the spec's envelope for every answer.
 */
export function adminRouter(deps: AdminDeps): express.Router {
  const router = express.Router();

  router.use(async (req: Request, _res: Response, next: NextFunction) => {
    try {
      await deps.auth.authorizeAdmin(req.get('authorization'));
      next();
    } catch (err) {
      next(err);
    }
  });

  router.get('/merchants/:merchantId', (req, res, next) => {
    try {
      const merchantId = merchantIdOf(req);
      if (deps.ready && !deps.ready()) throw new DirectoryNotReadyError();
      const merchant = deps.merchants.byId(merchantId);
      if (!merchant) throw notFound('merchant_not_found', `No merchant ${merchantId}`);
      res.json({ message: `merchant ${merchantId}`, error: null, data: viewOf(merchant, new Date()) });
    } catch (err) {
      next(err);
    }
  });

  router.put('/merchants/:merchantId', async (req, res, next) => {
    try {
      const merchantId = merchantIdOf(req);
      const settings = writable(deps);
      const input = merchantInputSchema.safeParse(req.body ?? {});
      if (!input.success) throw firstIssue(input.error);
      const { view, created, secret } = await settings.put(merchantId, input.data);
      deps.logger.info('merchant settings saved through the admin API', { merchantId, created });
      const data = secret && view.webhook ? { ...view, webhook: { ...view.webhook, secret } } : view;
      res.status(created ? 201 : 200).json({ message: `merchant ${merchantId} ${created ? 'created' : 'updated'}`, error: null, data });
    } catch (err) {
      next(err);
    }
  });

  router.post('/merchants/:merchantId/webhook/secret/rotate', async (req, res, next) => {
    try {
      const merchantId = merchantIdOf(req);
      const settings = writable(deps);
      const input = rotateInputSchema.safeParse(req.body ?? {});
      if (!input.success) throw firstIssue(input.error);
      const rotated = await settings.rotate(merchantId, input.data.graceSeconds);
      deps.logger.info('merchant webhook secret rotated', { merchantId, previousSecretExpiresAt: rotated.previousSecretExpiresAt });
      res.json({ message: `webhook secret of merchant ${merchantId} rotated`, error: null, data: rotated });
    } catch (err) {
      next(err);
    }
  });

  router.all(['/merchants/:merchantId', '/merchants/:merchantId/webhook/secret/rotate'], (req, _res, next) => {
    const allow = req.path.endsWith('/rotate') ? 'POST' : 'GET, PUT';
    next(new ApiError(405, 'method_not_allowed', `Use ${allow} for this endpoint`, { allow }));
  });

  // Domain errors become answers here; anything else goes on to the app's error handler.
  router.use((err: unknown, _req: Request, _res: Response, next: NextFunction) => {
    if (err instanceof InvalidSettingsError) return next(badRequest('invalid_settings', err.message));
    if (err instanceof MerchantNotFoundError) return next(notFound('merchant_not_found', `No merchant ${err.merchantId}`));
    if (err instanceof PublicKeyTakenError) return next(new ApiError(409, 'public_key_taken', 'Another merchant has this public key'));
    if (err instanceof WebhookNotSetUpError) return next(new ApiError(409, 'webhook_not_set_up', 'This merchant has no webhook; PUT one first'));
    if (err instanceof DirectoryNotReadyError) return next(unavailable('The merchant directory is still loading; try again shortly'));
    next(err);
  });
  return router;
}

function merchantIdOf(req: Request): string {
  const param = req.params.merchantId;
  const id = typeof param === 'string' ? param : '';
  if (!MERCHANT_ID.test(id)) {
    throw badRequest('invalid_merchant_id', 'The merchant id must be 1 to 200 letters, digits, ".", "_", ":" or "-", starting with a letter or digit');
  }
  return id;
}

function writable(deps: AdminDeps): MerchantSettings {
  if (!deps.settings) {
    throw new ApiError(409, 'directory_read_only', 'Merchant settings come from MERCHANTS_FILE here (MERCHANT_DIRECTORY=file); edit the file');
  }
  return deps.settings;
}
