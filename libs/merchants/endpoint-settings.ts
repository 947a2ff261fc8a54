import { graceSecrets } from './directory.js';
import { EndpointLimitError, EndpointNotFoundError, EndpointUrlTakenError, DisabledByOperatorError, MerchantNotFoundError, TooManySecretsError } from './errors.js';
import type { EndpointInput, EndpointPatch } from './settings-input.js';
import { disabledByOf, disabledByOperator, type Endpoint, MAX_GRACE_SECRETS, type Merchant } from './schema.js';
import { checkWebhookUrl, type EndpointView, endpointViewOf, type MerchantSettings, newWebhookSecret, urlIdentity, withStatus, type WriteGuards } from './settings.js';

/** Each change of an endpoint is a write of the merchant's versioned document through MerchantSettings. */
export class EndpointSettings {
  constructor(private readonly settings: MerchantSettings) {}

  list(merchantId: string): EndpointView[] {
    return endpointViewsOf(this.settings.merchant(merchantId), merchantId, this.settings.now());
  }

  /** Its new secret is returned here once (and to a repeat of its Idempotency-Key). */
  create(merchantId: string, input: EndpointInput, guards: WriteGuards = {}) {
    const url = checkWebhookUrl(input.url, this.settings.policy);
    let createdId: string | undefined;
    return this.settings.write('endpoint.create', merchantId, input, guards, (current, issued, now) => {
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
      return { view: endpointViewOf(endpoint, this.settings.now()), ...statusOf(endpoint), secret: endpoint.secret };
    });
  }

  patch(merchantId: string, endpointId: string, patch: EndpointPatch, guards: WriteGuards = {}) {
    const url = patch.url === undefined ? undefined : checkWebhookUrl(patch.url, this.settings.policy);
    return this.settings.write<{ view: EndpointView } & EndpointStatus>('endpoint.patch', merchantId, { endpointId, patch }, guards, (current, _issued, now) => {
      const kept = endpointOf(current, endpointId);
      // Moved elsewhere, it would leave its URL free for a new one, on at once.
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
    }, (next) => {
      const endpoint = endpointOf(next, endpointId);
      return { view: endpointViewOf(endpoint, this.settings.now()), ...statusOf(endpoint) };
    });
  }

  delete(merchantId: string, endpointId: string, guards: WriteGuards = {}) {
    return this.settings.write<{ deleted: string }>('endpoint.delete', merchantId, { endpointId }, guards, (current) => {
      // Deleted, it would leave its URL free for a new one: the operator's disable undone.
      const gone = endpointOf(current, endpointId);
      if (guards.by === 'merchant' && disabledByOperator(gone)) throw new DisabledByOperatorError(merchantId);
      return { ...current, endpoints: current.endpoints.filter((endpoint) => endpoint.id !== endpointId) };
    }, () => ({ deleted: endpointId }));
  }

  rotate(merchantId: string, endpointId: string, graceSeconds: number, guards: WriteGuards = {}) {
    const secret = newWebhookSecret();
    // The grace stamped by PostgreSQL's time of the write, by which it is judged, not this host's.
    return this.settings.write('endpoint.rotate', merchantId, { endpointId, graceSeconds }, guards, (current, _issued, now) => {
      return replaced(current, rotatedEndpoint(merchantId, endpointOf(current, endpointId), secret, graceSeconds, now));
    }, (next) => {
      const replacedSecret = graceSeconds > 0 ? endpointOf(next, endpointId).previousSecrets?.[0] : undefined;
      return { secret, previousSecretExpiresAt: replacedSecret?.expiresAt ?? null };
    });
  }
}

/**
 * What the view leaves out of the written endpoint: who turned it off, and whether it takes every
 * event because it names none (a view lists the three either way). A replica that does not hold
 * the write yet answers with these, not with a guess from the view.
 */
export interface EndpointStatus {
  disabledBy: 'operator' | 'merchant' | null;
  allEvents: boolean;
}

function statusOf(endpoint: Endpoint): EndpointStatus {
  return { disabledBy: disabledByOf(endpoint), allEvents: endpoint.events === undefined };
}

function endpointOf(merchant: Merchant, endpointId: string): Endpoint {
  const endpoint = merchant.endpoints.find((each) => each.id === endpointId);
  if (!endpoint) throw new EndpointNotFoundError(merchant.id, endpointId);
  return endpoint;
}

/** Another endpoint with this URL, however written, is 409 endpoint_url_taken. */
function checkUrlFree(merchant: Merchant, url: string, self?: string): void {
  const identity = urlIdentity(url);
  const holder = merchant.endpoints.find((endpoint) => endpoint.id !== self && urlIdentity(endpoint.url) === identity);
  if (holder) throw new EndpointUrlTakenError(merchant.id, holder.id);
}

/** The one `secret` replaces keeps signing `graceSeconds`, and so does every older one still in its grace. */
function rotatedEndpoint(merchantId: string, endpoint: Endpoint, secret: string, graceSeconds: number, now: Date): Endpoint {
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

/** A merchant's endpoints as shown (one: `endpointId`); MerchantNotFoundError or EndpointNotFoundError. */
export function endpointViewsOf(merchant: Merchant | undefined, merchantId: string, now: Date, endpointId?: string): EndpointView[] {
  if (!merchant) throw new MerchantNotFoundError(merchantId);
  const shown = endpointId === undefined ? merchant.endpoints : [endpointOf(merchant, endpointId)];
  return shown.map((endpoint) => endpointViewOf(endpoint, now));
}
