import type { Database, Listener } from '../../libs/delivery-store/index.js';
import type { Logger } from '../../libs/logger/index.js';
import type { MerchantDirectory } from '../../libs/merchants/index.js';
import { CIRCUIT_CLOSES_CHANNEL, circuitOfPayload } from '../../libs/waits/index.js';
import { endpointFor } from './stages/admission.js';
import { type EndpointGuards, endpointOf } from './stages/endpoint-guards.js';

/**
 * A circuit's row closed because its endpoint answered (any dispatcher's delivery, or its breaker
 * closing) closes this dispatcher's breaker for it too: the row decides. Else a breaker still open
 * here postponed the waits that close made due, opening the row again, and they stayed parked
 * until this breaker's own cooldown (up to 10 minutes) ended. A notification lost (its connection
 * dropped, listened to again within 5 s) leaves the breaker to its own probe, as before.
 */
export class CircuitCloses {
  private listener?: Listener;
  private stopped = false;

  constructor(
    private readonly db: Pick<Database, 'listen'>,
    private readonly merchants: Pick<MerchantDirectory, 'byId'>,
    private readonly guards: Pick<EndpointGuards, 'closeCircuit'>,
    private readonly logger: Logger,
  ) {}

  start(): void {
    void this.keepListening();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.listener?.close();
  }

  private closed(payload: string): void {
    const circuit = circuitOfPayload(payload);
    const merchant = circuit && this.merchants.byId(circuit.merchantId);
    // '' is the endpoint of a wait from before endpoints: the merchant's first, as admission has it.
    const endpoint = merchant && endpointFor(merchant, { endpointId: circuit.endpointId === '' ? undefined : circuit.endpointId });
    if (endpoint) this.guards.closeCircuit(endpointOf(circuit.merchantId, endpoint.url));
  }

  /** LISTEN on a connection of its own, again after each loss (notifications meanwhile are lost). */
  private async keepListening(): Promise<void> {
    for (let attempt = 0; !this.stopped; ) {
      try {
        this.listener = await this.db.listen(CIRCUIT_CLOSES_CHANNEL, (payload) => this.closed(payload));
        attempt = 0;
        if (this.stopped) return void (await this.listener.close());
        await this.listener.lost;
      } catch (err) {
        if (attempt === 0) this.logger.warn('circuit closes not heard: PostgreSQL did not answer; trying again', { error: (err as Error)?.message });
      }
      if (this.stopped) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(5_000, 250 * 2 ** attempt++)).unref());
    }
  }
}
