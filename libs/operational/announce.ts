import type { Logger } from '../logger/index.js';
import type { EndpointTransition } from '../merchants/index.js';
import { disabledEvent, enabledEvent } from './events.js';
import type { OperationalPublisher } from './publisher.js';

/**
 * What MerchantSettings calls after a write that turned a webhook off or on (admin API, CLI):
 * endpoint.disabled (reason manual) or endpoint.enabled, confirmed before the write's answer. The
 * write stands even if the broker never confirms the event: that is logged, never an error to the caller.
 */
export function announcer(publisher: OperationalPublisher, logger: Logger, onDisabled?: (reason: string) => void): (transition: EndpointTransition) => Promise<void> {
  return async (transition) => {
    const now = new Date();
    const event =
      transition.kind === 'enabled'
        ? enabledEvent({ merchantId: transition.merchantId, url: transition.url, enabledAt: transition.at }, now)
        : disabledEvent({ merchantId: transition.merchantId, url: transition.url, reason: transition.reason ?? 'manual', disabledAt: transition.at, failingSince: transition.failingSince }, now);
    if (transition.kind === 'disabled') onDisabled?.(transition.reason ?? 'manual');
    try {
      await publisher.publish(event);
    } catch (err) {
      logger.error('endpoint change saved, its operational event not published', { merchantId: transition.merchantId, kind: transition.kind, error: (err as Error).message });
    }
  };
}
