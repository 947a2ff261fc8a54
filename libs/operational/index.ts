export * from './events.js';
export { clockState, shouldDisable, shouldRecordFailing } from './disable-rule.js';
export { IntervalFolder } from './folder.js';
export { OperationalPublisher } from './publisher.js';
export { announcer } from './announce.js';
export { operationalEventSchema } from './schemas.js';
