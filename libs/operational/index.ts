export { attemptEvent, type AttemptFacts, disabledEvent, enabledEvent, FAILING_ATTEMPT } from './events.js';
export { type IdentifiedEvent, OPERATIONAL_EVENT_TYPES, type OperationalEvent } from './events.js';
export { type OperationalEventType, secretRotatedEvent, updatedEvent } from './events.js';
export { clockState, shouldDisable, shouldRecordFailing } from './disable-rule.js';
export { IntervalFolder } from './folder.js';
export { OperationalPublisher } from './publisher.js';
export { announcer } from './announce.js';
export { operationalEventSchema } from './schemas.js';
