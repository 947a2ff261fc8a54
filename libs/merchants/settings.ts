import { createHash, randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import { PLATFORM_MERCHANT_ID } from '../contracts/merchant-id.js';
import { isBlockedAddress } from '../http/address-guard.js';
import type { Actor } from './audit.js';
import type { PgMerchantDirectory } from './pg-directory.js';
import { newEndpointId } from './directory.js';
import { EVENT_NAMES } from '../contracts/events.js';
import { type DisabledReason, disabledByOperator, type Endpoint, MAX_ENDPOINTS_PER_MERCHANT, type Merchant } from './schema.js';
import { InvalidIdempotencyKeyError, InvalidSettingsError, MerchantNotFoundError } from './errors.js';
import { type MerchantInput, type MerchantPatch, WEBHOOK_URL_MAX_LENGTH } from './settings-input.js';

/** As Stripe takes it. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

export interface UrlPolicy {
  allowHttp: boolean;
  allowPrivateTargets: boolean;
}

/** An endpoint's URL as stored; throws InvalidSettingsError naming url. */
export function checkWebhookUrl(text: string, policy: UrlPolicy): string {
  if (!URL.canParse(text)) throw new InvalidSettingsError('url', 'must be an absolute URL');
  const url = new URL(text);
  if (url.protocol !== 'https:' && !(policy.allowHttp && url.protocol === 'http:')) {
    throw new InvalidSettingsError('url', policy.allowHttp ? 'must be an http(s) URL' : 'must be an https URL');
  }
  if (url.username || url.password) throw new InvalidSettingsError('url', 'must not carry credentials (user:password@)');
  // Never sent in a request: two endpoints differing by it alone would POST to the same URL.
  if (url.hash || text.includes('#')) throw new InvalidSettingsError('url', 'must not carry a fragment (#…): it is never sent');
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host) && !policy.allowPrivateTargets && isBlockedAddress(host)) {
    throw new InvalidSettingsError('url', 'must not point to a loopback, private, link-local or reserved address');
  }
  // Of the URL as stored and sent: percent-encoding makes a character up to 9.
  const written = url.toString();
  if (written.length > WEBHOOK_URL_MAX_LENGTH) throw new InvalidSettingsError('url', `must be at most ${WEBHOOK_URL_MAX_LENGTH} characters as it is sent (percent-encoded: ${written.length})`);
  return written;
}

/**
 * One resource however written (RFC 3986 6.2.2; `/x?` is `/x`; `host.` is `host`, the same name fully
 * qualified, which WHATWG's URL keeps): two such endpoints got every webhook twice, and an endpoint
 * the operator turned off could come back as a new one at the same receiver.
 */
export function urlIdentity(url: string): string {
  return withoutRootDot(url).replace(/\?$/, '').replace(/%([0-9A-Fa-f]{2})/g, (_all, hex: string) => {
    const char = String.fromCharCode(parseInt(hex, 16));
    return /^[A-Za-z0-9._~-]$/.test(char) ? char : `%${hex.toUpperCase()}`;
  });
}

/** The URL with one trailing dot of its host dropped (`host..` is no name: left as it is). */
function withoutRootDot(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url;
  }
  if (!parsed.hostname.endsWith('.') || parsed.hostname.endsWith('..')) return url;
  parsed.hostname = parsed.hostname.slice(0, -1);
  return parsed.toString();
}

/** Never a secret. */
export type MerchantView = ReturnType<typeof viewOf>;

export function viewOf(merchant: Merchant, now: Date) {
  return { id: merchant.id, publicKey: merchant.publicKey, endpoints: merchant.endpoints.map((endpoint) => endpointViewOf(endpoint, now)) };
}

/** Never a secret (apps/api/schemas.ts). */
export type EndpointView = ReturnType<typeof endpointViewOf>;

export function endpointViewOf(endpoint: Endpoint, now: Date) {
  // Reads no secret, so that the API opens none.
  const grace = (endpoint.previousSecrets ?? [])
    .filter(({ expiresAt }) => Date.parse(expiresAt) > now.getTime())
    .map(({ expiresAt }) => ({ expiresAt }))
    .sort((a, b) => Date.parse(b.expiresAt) - Date.parse(a.expiresAt));
  return {
    id: endpoint.id,
    description: endpoint.description ?? null,
    url: endpoint.url,
    enabled: endpoint.enabled,
    events: [...(endpoint.events ?? EVENT_NAMES)],
    previousSecretExpiresAt: grace[0]?.expiresAt ?? null,
    previousSecrets: grace,
    disabledReason: endpoint.enabled ? null : (endpoint.disabledReason ?? null),
    disabledAt: endpoint.enabled ? null : (endpoint.disabledAt ?? null),
    failingSince: endpoint.failingSince ?? null,
    orderByReference: endpoint.orderByReference === true,
    maxPerSecond: endpoint.maxPerSecond ?? null,
    // Lower while its 429/503 answers slow it: withCurrentRate reads that.
    currentPerSecond: endpoint.maxPerSecond ?? null,
  };
}

export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** Off, it says why and when (kept while off); on again or moved, it starts over. `disabling`: the operator disables. */
export function withStatus(kept: Endpoint | undefined, next: Endpoint, now: Date, by: 'operator' | 'merchant' = 'operator', disabling = false): Endpoint {
  const { disabledReason: _reason, disabledAt: _at, disabledBy: _by, failingSince: _since, lastFailureAt: _last, ...base } = next;
  const clock = kept?.failingSince ? { failingSince: kept.failingSince, ...(kept.lastFailureAt ? { lastFailureAt: kept.lastFailureAt } : {}) } : {};
  if (!next.enabled) {
    const operatorTakesOver = disabling && by === 'operator' && !disabledByOperator(kept);
    if (kept && !kept.enabled && kept.disabledReason && !operatorTakesOver) {
      return { ...base, disabledReason: kept.disabledReason, ...(kept.disabledAt ? { disabledAt: kept.disabledAt } : {}), ...(kept.disabledBy ? { disabledBy: kept.disabledBy } : {}), ...clock };
    }
    // Taking over a webhook already off keeps what its clock said; turning one off by hand starts it over.
    return { ...base, disabledReason: 'manual', disabledAt: now.toISOString(), disabledBy: by, ...(operatorTakesOver && kept && !kept.enabled ? clock : {}) };
  }
  if (kept?.enabled && kept.url === next.url) return { ...base, ...clock };
  return base;
}

/** What a write did to a webhook, for the platform (operational events endpoint.<kind>). */
export interface EndpointTransition {
  kind: 'disabled' | 'enabled' | 'updated' | 'secret_rotated';
  merchantId: string;
  endpointId: string;
  url: string;
  reason?: DisabledReason;
  failingSince?: string;
  changed?: Array<'url' | 'events'>;
  previousUrl?: string;
  events?: string[] | null;
  at: string;
}

/** Of each endpoint that existed before and after the write (adding or deleting one announces nothing). */
export function transitionsOf(before: Merchant | undefined, after: Merchant, now: Date): EndpointTransition[] {
  return after.endpoints.flatMap((webhook): EndpointTransition[] => {
    const was = before?.endpoints.find((each) => each.id === webhook.id);
    if (!was) return [];
    const base = { merchantId: after.id, endpointId: webhook.id, url: webhook.url, at: now.toISOString() };
    const changed = [...(was.url !== webhook.url ? (['url'] as const) : []), ...(JSON.stringify(was.events) !== JSON.stringify(webhook.events) ? (['events'] as const) : [])];
    return [
      ...(changed.length > 0 ? [{ ...base, kind: 'updated' as const, changed, previousUrl: was.url, events: webhook.events ?? null }] : []),
      ...(was.secret !== webhook.secret ? [{ ...base, kind: 'secret_rotated' as const }] : []),
      ...(was.enabled === webhook.enabled
        ? []
        : webhook.enabled
          ? [{ ...base, kind: 'enabled' as const }]
          : [{ ...base, kind: 'disabled' as const, reason: webhook.disabledReason ?? 'manual', ...(webhook.failingSince ? { failingSince: webhook.failingSince } : {}), at: webhook.disabledAt ?? base.at }]),
    ];
  });
}

export interface WriteGuards {
  idempotencyKey?: string;
  ifVersion?: number | '*';
  /** The operator (the default) or the merchant through the portal, who may not undo the operator. */
  by?: 'operator' | 'merchant';
  actor?: Actor;
}

/** The admin API, the portal and the CLI all write merchant settings through here, under the same rules. */
export class MerchantSettings {
  constructor(
    private readonly directory: PgMerchantDirectory,
    readonly policy: UrlPolicy,
    /** PostgreSQL's time, by which replaced secrets are judged. */
    readonly now: () => Date = () => directory.clock(),
    /** Told of each transition of a write (not a replay) once it is committed. */
    private readonly announce?: (transition: EndpointTransition) => Promise<void>,
    readonly maxEndpoints: number = MAX_ENDPOINTS_PER_MERCHANT,
  ) {}

  /** What a put or a patch answers. */
  private readonly answer = (next: Merchant, current: Merchant | undefined) =>
    ({ view: viewOf(next, this.now()), created: current === undefined });

  merchant(merchantId: string): Merchant | undefined {
    return this.directory.byId(merchantId);
  }

  get(merchantId: string): MerchantView | undefined {
    const merchant = this.directory.byId(merchantId);
    return merchant && viewOf(merchant, this.now());
  }

  /** The admin API's ETag. */
  versionOf(merchantId: string): number | undefined {
    return this.directory.versionOf(merchantId);
  }

  list(): MerchantView[] {
    return this.directory.list().map((merchant) => viewOf(merchant, this.now()));
  }

  /** Creates a merchant or replaces its own settings; its endpoints are written through EndpointSettings. */
  put(merchantId: string, input: MerchantInput, guards: WriteGuards = {}) {
    if (merchantId === PLATFORM_MERCHANT_ID) return Promise.reject(new InvalidSettingsError('merchant id', `is reserved for the platform's operational webhook (${PLATFORM_MERCHANT_ID})`));
    // A key another merchant holds is refused by PostgreSQL's unique index (PublicKeyTakenError), not
    // by this replica's memory: that may not have heard yet of the key let go of, or taken.
    return this.write('put', merchantId, input, guards, (current: Merchant | undefined) => ({ id: merchantId, publicKey: input.publicKey, endpoints: current?.endpoints ?? [] }), this.answer);
  }

  patch(merchantId: string, patch: MerchantPatch, guards: WriteGuards = {}) {
    return this.write('patch', merchantId, patch, guards, (current) => ({ ...current, publicKey: patch.publicKey ?? current.publicKey }), this.answer);
  }

  /**
   * `change` may be applied more than once (after a race): a secret or id it issues is the same each time.
   * Only a put is given no merchant; the others are refused with MerchantNotFoundError first.
   */
  async write<T extends object>(
    operation: 'put' | 'patch' | 'endpoint.create' | 'endpoint.patch' | 'endpoint.delete' | 'endpoint.rotate',
    merchantId: string,
    input: unknown,
    { idempotencyKey, ifVersion, actor }: WriteGuards,
    change: (current: Merchant, issued: { secret(): string; endpointId(): string }, now: Date) => Merchant,
    result: (next: Merchant, current: Merchant | undefined) => T,
  ) {
    const made: { secret?: string; endpointId?: string } = {};
    const issued = { secret: () => (made.secret ??= newWebhookSecret()), endpointId: () => (made.endpointId ??= newEndpointId()) };
    let before: Merchant | undefined;
    const apply = (current: Merchant | undefined, now: Date) => {
      before = current;
      if (!current && operation !== 'put') throw new MerchantNotFoundError(merchantId);
      return change(current!, issued, now);
    };
    if (idempotencyKey !== undefined && !IDEMPOTENCY_KEY.test(idempotencyKey)) throw new InvalidIdempotencyKeyError();
    const idempotency = idempotencyKey === undefined ? undefined : {
      key: idempotencyKey,
      fingerprint: createHash('sha256').update(JSON.stringify([operation, merchantId, input])).digest('base64url'),
      result,
    };
    const written = await this.directory.update(merchantId, apply, { ifVersion, idempotency, by: actor });
    if (written.changed && this.announce) {
      for (const transition of transitionsOf(before, written.merchant, this.now())) await this.announce(transition);
    }
    const answer = (written.replayed || idempotency ? written.result : result(written.merchant, written.created ? undefined : written.merchant)) as T;
    // The version after the write is its ETag.
    return { ...answer, replayed: written.replayed, version: written.version };
  }
}
