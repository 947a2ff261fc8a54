import { receivesEvent, type Endpoint } from '../merchants/index.js';

/** What a resend needs to know of the merchant: its id, and whether its endpoints are on and for which events. */
export interface ResendTarget {
  id: string;
  endpoints: ReadonlyArray<Pick<Endpoint, 'enabled' | 'events'>>;
}

/** The merchant's webhook is off or not set up: a resent copy would only fail again, so nothing is claimed and the failures stay. */
export class WebhookDisabledError extends Error {
  constructor(readonly merchantId: string) {
    super(`the webhook of merchant ${merchantId} is disabled or not set up; enable it, then resend`);
    this.name = 'WebhookDisabledError';
  }
}

/**
 * The checks every resend makes before it claims anything (the API's, the portal's, the CLI's:
 * ResendService runs them, so none can skip them): the webhook must be on, and the events it no
 * longer receives are left failed (EventNotSubscribedError when nothing else is left).
 */
export function receiverOf(target: ResendTarget): (event: string) => boolean {
  // A merchant's one endpoint while it has at most one (ENDPOINTS_NOW).
  const webhook = target.endpoints[0];
  if (!webhook?.enabled) throw new WebhookDisabledError(target.id);
  return (event) => receivesEvent(webhook, event);
}
