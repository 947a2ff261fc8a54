export { type IntakeKey, IntakeKeyStore, type KeyNote, type KeyStates } from './store.js';
export { IntakeChecker, type IntakeCheckerOptions, type Sight } from './checker.js';
