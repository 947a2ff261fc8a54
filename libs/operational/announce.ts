import type { Logger } from '../logger/index.js';
import type { EndpointTransition } from '../merchants/index.js';
import { disabledEvent, enabledEvent, secretRotatedEvent, updatedEvent } from './events.js';
import type { OperationalPublisher } from './publisher.js';

/** Publishes an endpoint write's event before the write's answer; the write stands if the event is never confirmed. */
export function announcer(publisher: OperationalPublisher, logger: Logger, onDisabled?: (reason: string) => void): (transition: EndpointTransition) => Promise<void> {
  return async (transition) => {
    const now = new Date();
    const { merchantId, endpointId, url, at } = transition;
    const event =
      transition.kind === 'enabled'
        ? enabledEvent({ merchantId, endpointId, url, enabledAt: at }, now)
        : transition.kind === 'updated'
          ? updatedEvent({ merchantId, endpointId, url, previousUrl: transition.previousUrl!, changed: transition.changed!, events: transition.events ?? null, updatedAt: at }, now)
          : transition.kind === 'secret_rotated'
            ? secretRotatedEvent({ merchantId, endpointId, url, rotatedAt: at }, now)
            : disabledEvent({ merchantId, endpointId, url, reason: transition.reason ?? 'manual', disabledAt: at, failingSince: transition.failingSince }, now);
    if (transition.kind === 'disabled') onDisabled?.(transition.reason ?? 'manual');
    try {
      await publisher.publish(event);
    } catch (err) {
      logger.error('endpoint change saved, its operational event not published', { merchantId: transition.merchantId, kind: transition.kind, error: (err as Error).message });
    }
  };
}
