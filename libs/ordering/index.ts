export { ORDER_ENDED_KEEP_MS, type OrderAdmit, type OrderEnd, type OrderLine, type OrderState, OrderStore } from './store.js';
export { OrderGate } from './gate.js';
export type { OrderTurn } from './turns.js';
export { ORDER_UPKEEP_BATCH, ORDER_UPKEEP_EVERY_MS, orderingLines, OrderUpkeep } from './upkeep.js';
