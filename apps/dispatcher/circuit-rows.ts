import { type Database, keepListening, type Listener, type Listening } from '../../libs/delivery-store/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { CIRCUIT_CHANNEL, type CircuitState, circuitOfPayload, type WaitStore } from '../../libs/waits/index.js';
import type { EndpointGuards } from './stages/endpoint-guards.js';

/**
 * This dispatcher's breakers follow the circuits' rows (wait_circuits), the one copy that decides:
 * each row opened or closed is announced on commit, and on each (re)start of the LISTEN every open
 * row is read, so what was announced while it was away is not missed. While PostgreSQL does not
 * answer, the breakers keep what they last heard.
 */
export class CircuitRows {
  private listening?: Listening;
  private stopped = false;

  constructor(
    private readonly db: Pick<Database, 'listen'>,
    private readonly store: Pick<WaitStore, 'openCircuits'>,
    /** The breaker's key of a row's endpoint, or undefined when it has none. */
    private readonly keyOf: (merchantId: string, endpointId: string) => string | undefined,
    private readonly guards: Pick<EndpointGuards, 'openCircuit' | 'closeCircuit' | 'openKeys'>,
    private readonly logger: Logger,
  ) {}

  start(): void {
    if (this.stopped || this.listening) return;
    this.listening = keepListening(this.db, CIRCUIT_CHANNEL, {
      heard: (payload) => {
        const circuit = circuitOfPayload(payload);
        if (circuit) this.follow(circuit);
      },
      connected: (listener) => this.catchUp(listener),
      failed: (err) => this.logger.warn("circuits' rows not heard: PostgreSQL did not answer; trying again", { error: (err as Error)?.message }),
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.listening?.stop();
  }

  private follow(circuit: CircuitState): void {
    const key = this.keyOf(circuit.merchantId, circuit.endpointId);
    if (key === undefined) return;
    if (circuit.open) this.guards.openCircuit(key, circuit.cooldownMs, circuit.probeInMs);
    else this.guards.closeCircuit(key, circuit.answered);
  }

  /** Every row open now opens its breaker; a breaker open here with no open row closes, not answered. */
  private async catchUp(listener: Listener): Promise<void> {
    const open = await this.store.openCircuits(listener);
    const keys = new Set(open.map((circuit) => this.keyOf(circuit.merchantId, circuit.endpointId)));
    for (const key of this.guards.openKeys()) if (!keys.has(key)) this.guards.closeCircuit(key, false);
    for (const circuit of open) this.follow(circuit);
  }
}
