import type { Logger } from '../logger/index.js';
import { isDataRefusal } from '../delivery-store/refusals.js';
import { RetryingBatcher, throttledWarning } from '../runtime/batcher.js';
import type { CircuitKey } from './circuits.js';
import type { WaitEnd, WaitPut, WaitStore } from './store.js';

type Item = { put: WaitPut } | { end: WaitEnd } | { close: CircuitKey };

/** A write resolves once committed (tried again meanwhile); it rejects only when PostgreSQL refuses what it carries. */
export class WaitWriter {
  private readonly batcher: RetryingBatcher<Item, void>;

  constructor(store: WaitStore, logger: Logger, backoffMs?: readonly number[]) {
    const warn = throttledWarning((message, fields) => logger.warn(message, fields));
    this.batcher = new RetryingBatcher<Item, void>(
      (items) => store.write(
        items.flatMap((i) => ('put' in i ? [i.put] : [])),
        items.flatMap((i) => ('end' in i ? [i.end] : [])),
        items.flatMap((i) => ('close' in i ? [i.close] : [])),
      ),
      (err, held) => warn('waits not written; their deliveries are held unacked until PostgreSQL answers', err, { held }),
      backoffMs,
      isDataRefusal,
    );
  }

  put(wait: WaitPut): Promise<void> {
    return this.batcher.add({ put: wait });
  }

  end(wait: WaitEnd): Promise<void> {
    return this.batcher.add({ end: wait });
  }

  closeCircuit(circuit: CircuitKey): Promise<void> {
    return this.batcher.add({ close: circuit });
  }

  /** Writes still pending never resolve (their deliveries go back with the channel). */
  close(): void {
    this.batcher.close();
  }
}
