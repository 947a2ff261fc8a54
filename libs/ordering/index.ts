export { ORDER_ENDED_KEEP_MS, type OrderAdmit, type OrderEnd, type OrderState, OrderStore } from './store.js';
export { OrderGate } from './gate.js';
export type { OrderTurn } from './turns.js';
export { orderingLines, OrderUpkeep } from './upkeep.js';
