import { EVENT_NAMES } from '../contracts/events.js';
import { graceExpiries, graceSecrets } from './directory.js';
import { TooManySecretsError } from './errors.js';
import { type DisabledReason, type Endpoint, MAX_GRACE_SECRETS } from './schema.js';

/** One endpoint as the admin API, the CLI and the portal show it: never a secret. */
export interface EndpointView {
  id: string;
  url: string;
  /** What the merchant calls it; null when not given. */
  description: string | null;
  enabled: boolean;
  events: string[];
  /** When the last of the previous secrets stops signing; null when none is in its grace. */
  previousSecretExpiresAt: string | null;
  /** Each previous secret still signing, by when it stops, the latest first. */
  previousSecrets: Array<{ expiresAt: string }>;
  /** Why it is off (`failing`: disabled automatically; `manual`) and since when; null while enabled. */
  disabledReason: DisabledReason | null;
  disabledAt: string | null;
  /** The first failure after its last success, once it has failed a tenth of ENDPOINT_DISABLE_AFTER; null otherwise. */
  failingSince: string | null;
  /** Order per reference (libs/ordering): a webhook waits while an earlier one of its reference is not yet ended. */
  orderByReference: boolean;
  /** At most this many webhooks a second (the throttle); null: no limit. */
  maxPerSecond: number | null;
  /** The rate it is sent at now: maxPerSecond, or lower while its 429/503 answers slow it (withCurrentRate); null: no limit. */
  currentPerSecond: number | null;
}

export function endpointViewOf(endpoint: Endpoint, now: Date): EndpointView {
  const grace = graceExpiries(endpoint, now);
  return {
    id: endpoint.id,
    description: endpoint.description ?? null,
    url: endpoint.url,
    enabled: endpoint.enabled,
    events: [...(endpoint.events ?? EVENT_NAMES)],
    previousSecretExpiresAt: grace[0]?.expiresAt ?? null,
    previousSecrets: grace.map(({ expiresAt }) => ({ expiresAt })),
    disabledReason: endpoint.enabled ? null : (endpoint.disabledReason ?? null),
    disabledAt: endpoint.enabled ? null : (endpoint.disabledAt ?? null),
    failingSince: endpoint.failingSince ?? null,
    orderByReference: endpoint.orderByReference === true,
    maxPerSecond: endpoint.maxPerSecond ?? null,
    currentPerSecond: endpoint.maxPerSecond ?? null,
  };
}

/**
 * The endpoint signing with `secret` from now: the one it replaces keeps signing `graceSeconds`,
 * and so does every older one still in its own grace (a second rotation never stops a secret the
 * merchant may still verify with). At most MAX_GRACE_SECRETS old ones: TooManySecretsError.
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
