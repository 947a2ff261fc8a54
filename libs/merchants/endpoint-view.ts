import { EVENT_NAMES } from '../contracts/events.js';
import { graceExpiries, graceSecrets } from './directory.js';
import { TooManySecretsError } from './errors.js';
import { type Endpoint, MAX_GRACE_SECRETS } from './schema.js';

/** One endpoint as the admin API and the CLI show it (apps/api/schemas.ts): never a secret. */
export type EndpointView = ReturnType<typeof endpointViewOf>;

export function endpointViewOf(endpoint: Endpoint, now: Date) {
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
    // Lower while its 429/503 answers slow it: withCurrentRate reads that.
    currentPerSecond: endpoint.maxPerSecond ?? null,
  };
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
