import { legacyEndpointId, receivesEvent, type Endpoint } from '../merchants/index.js';
import { NamedError } from '../runtime/named-error.js';

/** What a resend needs to know of the merchant. */
export interface ResendTarget {
  id: string;
  endpoints: ReadonlyArray<Pick<Endpoint, 'id' | 'enabled' | 'events'>>;
}

/** The endpoint (without one named: every endpoint) is off or not set up: a copy would only fail again, so nothing is claimed. */
export class WebhookDisabledError extends NamedError {
  constructor(readonly merchantId: string, readonly endpointId?: string) {
    super(
      endpointId === undefined
        ? `no endpoint of merchant ${merchantId} is enabled (or none is set up); enable one, then resend`
        : `endpoint ${endpointId} of merchant ${merchantId} is disabled; enable it, then resend`,
    );
  }
}

/** Every failure found is of an endpoint deleted since: nowhere to resend it (the entry stays until retention). */
export class EndpointDeletedError extends NamedError {
  constructor(readonly endpointIds: string[]) {
    super(`endpoint ${endpointIds.join(', ')} was deleted; its failed webhooks cannot be resent`);
  }
}

/** Where one failure would be resent, or why it stays failed. */
export type Verdict = { send: string } | { keep: 'disabled' | 'deleted' | 'not-subscribed'; endpointId: string };

/**
 * The checks every resend makes. Before anything is claimed: some endpoint must be on (`only`: that
 * one), else WebhookDisabledError. Per failure: its endpoint must exist, be on and receive the event.
 */
export function receiverOf(target: ResendTarget, only?: string): (failure: { endpointId: string; event: string }) => Verdict {
  const named = only === undefined ? undefined : target.endpoints.find((e) => e.id === only);
  if (named ? !named.enabled : !target.endpoints.some((e) => e.enabled)) throw new WebhookDisabledError(target.id, named?.id);
  return ({ endpointId, event }) => {
    // '': the endpoint its webhook became (0011), also in what a 409 names. None: deleted since.
    const id = endpointId === '' ? legacyEndpointId(target.id) : endpointId;
    const endpoint = target.endpoints.find((e) => e.id === id);
    if (!endpoint) return { keep: 'deleted', endpointId: id };
    if (!endpoint.enabled) return { keep: 'disabled', endpointId: endpoint.id };
    if (!receivesEvent(endpoint, event)) return { keep: 'not-subscribed', endpointId: endpoint.id };
    return { send: endpoint.id };
  };
}
