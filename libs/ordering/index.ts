export { type OrderAdmit, type OrderEnd, OrderStore } from './store.js';
export { OrderGate } from './gate.js';
