export { ORDER_ENDED_KEEP_MS, type OrderAdmit, type OrderEnd, type OrderState, OrderStore } from './store.js';
export { OrderGate } from './gate.js';
