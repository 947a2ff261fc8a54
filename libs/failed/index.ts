export * from './entries.js';
export { EntryExpiredError, readEntryAt } from './reader.js';
