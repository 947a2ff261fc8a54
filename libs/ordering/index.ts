export { type OrderAdmit, type OrderEnd, type OrderState, OrderStore } from './store.js';
export { OrderGate } from './gate.js';
