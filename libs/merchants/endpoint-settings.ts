import { graceSecrets } from './directory.js';
import { EndpointLimitError, EndpointNotFoundError, EndpointUrlTakenError, DisabledByOperatorError, MerchantNotFoundError, TooManySecretsError } from './errors.js';
import type { EndpointInput, EndpointPatch } from './settings-input.js';
import { disabledByOperator, type Endpoint, MAX_GRACE_SECRETS, type Merchant } from './schema.js';
import { checkWebhookUrl, type EndpointView, endpointViewOf, type MerchantSettings, newWebhookSecret, urlIdentity, withStatus, type WriteGuards, type Written } from './settings.js';

/**
 * A merchant's endpoints, one at a time: each change is a write of the merchant's one versioned
 * document through MerchantSettings (its ETag, Idempotency-Key, audit and announcements). The limit
 * and a URL's uniqueness are checked on the locked row.
 */
export class EndpointSettings {
  constructor(private readonly settings: MerchantSettings) {}

  /** The merchant's endpoints as shown; MerchantNotFoundError when there is no such merchant. */
  list(merchantId: string): EndpointView[] {
    return endpointViewsOf(this.settings.merchant(merchantId), merchantId, this.settings.now());
  }

  /** A new endpoint with a new secret, returned here once (and to a repeat of its Idempotency-Key). */
  create(merchantId: string, input: EndpointInput, guards: WriteGuards = {}) {
    const url = checkWebhookUrl(input.url, this.settings.policy);
    let createdId: string | undefined;
    return this.settings.write('endpoint.create', merchantId, input, guards, (current, issued, now) => {
      if (!current) throw new MerchantNotFoundError(merchantId);
      if (current.endpoints.length >= this.settings.maxEndpoints) throw new EndpointLimitError(merchantId, this.settings.maxEndpoints);
      checkUrlFree(current, url);
      createdId = issued.endpointId();
      const endpoint: Endpoint = {
        id: createdId,
        url,
        ...(input.description ? { description: input.description } : {}),
        enabled: input.enabled,
        secret: issued.secret(),
        secretIssuedAt: now.toISOString(),
        ...(input.events ? { events: input.events } : {}),
        ...(input.maxPerSecond === undefined ? {} : { maxPerSecond: input.maxPerSecond }),
        ...(input.orderByReference ? { orderByReference: true } : {}),
      };
      return { ...current, endpoints: [...current.endpoints, withStatus(undefined, endpoint, now, guards.by, !input.enabled)] };
    }, (next) => {
      const endpoint = endpointOf(next, createdId!);
      return { view: endpointViewOf(endpoint, this.settings.now()), secret: endpoint.secret };
    });
  }

  /** Changes only what the patch names. */
  patch(merchantId: string, endpointId: string, patch: EndpointPatch, guards: WriteGuards = {}): Promise<Written<{ view: EndpointView }>> {
    const url = patch.url === undefined ? undefined : checkWebhookUrl(patch.url, this.settings.policy);
    return this.settings.write<{ view: EndpointView }>('endpoint.patch', merchantId, { endpointId, patch }, guards, (current, _issued, now) => {
      if (!current) throw new MerchantNotFoundError(merchantId);
      const kept = endpointOf(current, endpointId);
      // Moved elsewhere, the endpoint the operator turned off would leave its URL free for a new one, on at once.
      if (guards.by === 'merchant' && url !== undefined && url !== kept.url && disabledByOperator(kept)) throw new DisabledByOperatorError(merchantId);
      if (url !== undefined && url !== kept.url) checkUrlFree(current, url, endpointId);
      const next: Endpoint = { ...kept, url: url ?? kept.url, ...(patch.enabled === undefined ? {} : { enabled: patch.enabled }) };
      // A merge patch: null goes back to none; an endpoint not ordered keeps no `orderByReference: false`.
      for (const field of ['description', 'events', 'maxPerSecond', 'orderByReference'] as const) {
        if (patch[field] === null || patch[field] === false) delete next[field];
        else if (patch[field] !== undefined) Object.assign(next, { [field]: patch[field] });
      }
      if (guards.by === 'merchant' && next.enabled && disabledByOperator(kept)) throw new DisabledByOperatorError(merchantId);
      return replaced(current, withStatus(kept, next, now, guards.by, patch.enabled === false));
    }, (next) => ({ view: endpointViewOf(endpointOf(next, endpointId), this.settings.now()) }));
  }

  /** Removes the endpoint: the dispatchers stop sending to it as soon as they see the change. */
  delete(merchantId: string, endpointId: string, guards: WriteGuards = {}): Promise<Written<{ deleted: string }>> {
    return this.settings.write<{ deleted: string }>('endpoint.delete', merchantId, { endpointId }, guards, (current) => {
      if (!current) throw new MerchantNotFoundError(merchantId);
      // Deleted, it would leave its URL free for a new endpoint: the operator's disable undone by the merchant.
      const gone = endpointOf(current, endpointId);
      if (guards.by === 'merchant' && disabledByOperator(gone)) throw new DisabledByOperatorError(merchantId);
      return { ...current, endpoints: current.endpoints.filter((endpoint) => endpoint.id !== endpointId) };
    }, () => ({ deleted: endpointId }));
  }

  /** A new secret for this endpoint alone; the others keep theirs. */
  rotate(merchantId: string, endpointId: string, graceSeconds: number, guards: WriteGuards = {}) {
    const secret = newWebhookSecret();
    // The grace stamped by PostgreSQL's time of the write, by which the writes and the dispatchers
    // judge it: on an API host 10 minutes behind, a grace of 5 had ended before it began.
    return this.settings.write('endpoint.rotate', merchantId, { endpointId, graceSeconds }, guards, (current, _issued, now) => {
      if (!current) throw new MerchantNotFoundError(merchantId);
      return replaced(current, rotatedEndpoint(merchantId, endpointOf(current, endpointId), secret, graceSeconds, now));
    }, (next) => {
      const replacedSecret = graceSeconds > 0 ? endpointOf(next, endpointId).previousSecrets?.[0] : undefined;
      return { secret, previousSecretExpiresAt: replacedSecret?.expiresAt ?? null };
    });
  }
}

function endpointOf(merchant: Merchant, endpointId: string): Endpoint {
  const endpoint = merchant.endpoints.find((each) => each.id === endpointId);
  if (!endpoint) throw new EndpointNotFoundError(merchant.id, endpointId);
  return endpoint;
}

/** Another endpoint of the merchant with this URL, however written (urlIdentity), is 409 endpoint_url_taken. */
function checkUrlFree(merchant: Merchant, url: string, self?: string): void {
  const identity = urlIdentity(url);
  const holder = merchant.endpoints.find((endpoint) => endpoint.id !== self && urlIdentity(endpoint.url) === identity);
  if (holder) throw new EndpointUrlTakenError(merchant.id, holder.id);
}

/**
 * The endpoint signing with `secret` from now: the one it replaces keeps signing `graceSeconds`, and
 * so does every older one still in its grace (the merchant may still verify with it).
 */
export function rotatedEndpoint(merchantId: string, endpoint: Endpoint, secret: string, graceSeconds: number, now: Date): Endpoint {
  const grace = graceSecrets(endpoint, now);
  if (graceSeconds > 0) {
    if (grace.length >= MAX_GRACE_SECRETS) throw new TooManySecretsError(merchantId, endpoint.id, grace[grace.length - 1]!.expiresAt);
    grace.unshift({ secret: endpoint.secret, expiresAt: new Date(now.getTime() + graceSeconds * 1000).toISOString() });
  }
  const { previousSecrets: _all, ...rest } = endpoint;
  return { ...rest, secret, secretIssuedAt: now.toISOString(), ...(grace.length > 0 ? { previousSecrets: grace } : {}) };
}

function replaced(merchant: Merchant, endpoint: Endpoint): Merchant {
  return { ...merchant, endpoints: merchant.endpoints.map((each) => (each.id === endpoint.id ? endpoint : each)) };
}

/**
 * A merchant's endpoints as shown (one: `endpointId`), from the directory the program holds;
 * MerchantNotFoundError or EndpointNotFoundError.
 */
export function endpointViewsOf(merchant: Merchant | undefined, merchantId: string, now: Date, endpointId?: string): EndpointView[] {
  if (!merchant) throw new MerchantNotFoundError(merchantId);
  const shown = endpointId === undefined ? merchant.endpoints : [endpointOf(merchant, endpointId)];
  return shown.map((endpoint) => endpointViewOf(endpoint, now));
}
