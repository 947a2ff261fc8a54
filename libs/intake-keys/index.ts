export { type IntakeKey, IntakeKeyStore, type KeyNote, type KeyState } from './store.js';
export { IntakeChecker, type IntakeCheckerOptions, type Sight } from './checker.js';
