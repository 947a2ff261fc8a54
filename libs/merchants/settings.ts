import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import { z } from 'zod';
import { EVENT_NAMES } from '../contracts/events.js';
import { isBlockedAddress } from '../http/address-guard.js';
import type { BrokerMerchantDirectory } from './broker-directory.js';
import { type Merchant, type MerchantWebhook, webhookEventsSchema } from './schema.js';

/** What the dashboard's backend (or an operator) sends: everything but the secret, which the service owns. */
export const merchantInputSchema = z
  .object({
    publicKey: z.string().min(8, 'must be at least 8 characters').max(512, 'must be at most 512 characters'),
    webhook: z
      .object({
        url: z.string().min(1, 'is required').max(2048, 'must be at most 2048 characters'),
        enabled: z.boolean({ error: 'must be true or false' }),
        events: webhookEventsSchema.optional(),
      })
      .strict()
      .optional(),
  })
  .strict();

export type MerchantInput = z.infer<typeof merchantInputSchema>;

export const rotateInputSchema = z
  .object({
    graceSeconds: z
      .number({ error: 'must be a number of seconds' })
      .int('must be a whole number of seconds')
      .min(0, 'must be 0 or more')
      .max(30 * 86_400, 'must be at most 2592000 (30 days)')
      .default(86_400),
  })
  .strict();

/** Where webhook URLs may point: https outside development, and the address guard's rules. */
export interface UrlPolicy {
  allowHttp: boolean;
  allowPrivateTargets: boolean;
}

/** A field of the input is wrong: `field` names it (webhook.url, publicKey, …). */
export class InvalidSettingsError extends Error {
  constructor(readonly field: string, detail: string) {
    super(`${field}: ${detail}`);
    this.name = 'InvalidSettingsError';
  }
}

export class MerchantNotFoundError extends Error {
  constructor(readonly merchantId: string) {
    super(`no merchant ${merchantId}`);
    this.name = 'MerchantNotFoundError';
  }
}

export class PublicKeyTakenError extends Error {
  constructor() {
    super('another merchant has this public key');
    this.name = 'PublicKeyTakenError';
  }
}

export class WebhookNotSetUpError extends Error {
  constructor(readonly merchantId: string) {
    super(`merchant ${merchantId} has no webhook to rotate the secret of`);
    this.name = 'WebhookNotSetUpError';
  }
}

/** Checks a webhook URL on write; throws InvalidSettingsError naming webhook.url. */
export function checkWebhookUrl(text: string, policy: UrlPolicy): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new InvalidSettingsError('webhook.url', 'must be an absolute URL');
  }
  if (url.protocol !== 'https:' && !(policy.allowHttp && url.protocol === 'http:')) {
    throw new InvalidSettingsError('webhook.url', policy.allowHttp ? 'must be an http(s) URL' : 'must be an https URL');
  }
  if (url.username || url.password) throw new InvalidSettingsError('webhook.url', 'must not carry credentials (user:password@)');
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host) && !policy.allowPrivateTargets && isBlockedAddress(host)) {
    throw new InvalidSettingsError('webhook.url', 'points to a loopback, private, link-local or reserved address');
  }
  return url.toString();
}

/** A merchant's settings as the admin API and the CLI show them: never a secret. */
export interface MerchantView {
  id: string;
  publicKey: string;
  webhook: { url: string; enabled: boolean; events: string[]; previousSecretExpiresAt: string | null } | null;
}

export function viewOf(merchant: Merchant, now: Date): MerchantView {
  const webhook = merchant.webhook;
  const previous = webhook?.previousSecret;
  return {
    id: merchant.id,
    publicKey: merchant.publicKey,
    webhook: webhook
      ? {
          url: webhook.url,
          enabled: webhook.enabled,
          events: [...(webhook.events ?? EVENT_NAMES)],
          previousSecretExpiresAt: previous && Date.parse(previous.expiresAt) > now.getTime() ? previous.expiresAt : null,
        }
      : null,
  };
}

export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/**
 * Creating, changing and rotating merchant settings on the merchants stream: the admin API and the
 * CLI both go through here, so both apply the same rules.
 */
export class MerchantSettings {
  constructor(
    private readonly directory: BrokerMerchantDirectory,
    private readonly policy: UrlPolicy,
    private readonly now: () => Date = () => new Date(),
  ) {}

  get(merchantId: string): MerchantView | undefined {
    const merchant = this.directory.byId(merchantId);
    return merchant && viewOf(merchant, this.now());
  }

  list(): MerchantView[] {
    return this.directory.list().map((merchant) => viewOf(merchant, this.now()));
  }

  /**
   * Creates or replaces a merchant's settings. The webhook's secret is kept; a webhook set up for
   * the first time gets a new one, returned here once and never shown again.
   */
  async put(merchantId: string, input: MerchantInput): Promise<{ view: MerchantView; created: boolean; secret?: string }> {
    const url = input.webhook ? checkWebhookUrl(input.webhook.url, this.policy) : undefined;
    const owner = this.directory.byPublicKey(input.publicKey);
    if (owner && owner.id !== merchantId) throw new PublicKeyTakenError();
    let secret: string | undefined;
    const { merchant, created } = await this.directory.update(merchantId, (current) => {
      let webhook: MerchantWebhook | undefined;
      if (input.webhook) {
        const kept = current?.webhook;
        secret = kept ? undefined : newWebhookSecret();
        webhook = {
          url: url!,
          enabled: input.webhook.enabled,
          secret: kept?.secret ?? secret!,
          ...(input.webhook.events ? { events: input.webhook.events } : {}),
          ...(kept?.previousSecret ? { previousSecret: kept.previousSecret } : {}),
        };
      }
      return { id: merchantId, publicKey: input.publicKey, ...(webhook ? { webhook } : {}) };
    });
    return { view: viewOf(merchant, this.now()), created, ...(secret ? { secret } : {}) };
  }

  /**
   * A new secret; until `graceSeconds` have passed every webhook is signed with it and with the
   * one it replaces, so the merchant can switch its verification at any time in between.
   */
  async rotate(merchantId: string, graceSeconds: number): Promise<{ secret: string; previousSecretExpiresAt: string | null }> {
    const secret = newWebhookSecret();
    const now = this.now();
    const expiresAt = graceSeconds > 0 ? new Date(now.getTime() + graceSeconds * 1000).toISOString() : null;
    await this.directory.update(merchantId, (current) => {
      if (!current) throw new MerchantNotFoundError(merchantId);
      if (!current.webhook) throw new WebhookNotSetUpError(merchantId);
      const { previousSecret: _replaced, ...webhook } = current.webhook;
      return {
        ...current,
        webhook: { ...webhook, secret, ...(expiresAt ? { previousSecret: { secret: current.webhook.secret, expiresAt } } : {}) },
      };
    });
    return { secret, previousSecretExpiresAt: expiresAt };
  }
}

/** The first problem of a zod parse as field and message, for a 400 or a CLI error naming the field. */
export function firstIssue(error: z.ZodError): InvalidSettingsError {
  const issue = error.issues[0]!;
  const field = issue.path.join('.') || 'body';
  const detail = issue.code === 'unrecognized_keys' ? `unknown field ${issue.keys.join(', ')}` : issue.message;
  return new InvalidSettingsError(field, detail);
}
