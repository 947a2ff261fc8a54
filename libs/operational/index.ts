export {
  attemptEvent,
  type AttemptFacts,
  disabledEvent,
  type DisabledFacts,
  enabledEvent,
  secretRotatedEvent,
  updatedEvent,
  FAILING_ATTEMPT,
  type IdentifiedEvent,
  OPERATIONAL_EVENT_TYPES,
  type OperationalEvent,
  type OperationalEventType,
} from './events.js';
export { clockState, shouldDisable, shouldRecordFailing } from './disable-rule.js';
export { IntervalFolder } from './folder.js';
export { OperationalPublisher, type OperationalPublisherOptions } from './publisher.js';
export { announcer } from './announce.js';
export { operationalEventSchema } from './schemas.js';
