import { Dispatcher, type DispatcherSettings } from '../../apps/dispatcher/dispatcher.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { FailedStore } from '../../libs/failed/index.js';
import { createUndiciClient } from '../../libs/http/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { OrderGate, OrderStore } from '../../libs/ordering/index.js';
import { WaitStore, WaitWriter } from '../../libs/waits/index.js';
import { circuitRows, type Harness } from './harness.js';

/**
 * Another dispatcher on the harness's broker, directory and database (its own connections): one
 * beside the harness's, or the one that takes over once it has stopped. Its breakers follow the
 * circuits' rows only once the test calls follow(). `settings` go over a short delivery timeout and
 * a minute's wait lease.
 */
export function otherDispatcher(harness: Harness, settings: Partial<DispatcherSettings> & Pick<DispatcherSettings, 'retryDelaysMs' | 'userAgent'>) {
  const logger = silentLogger();
  const db = openPostgres(harness.database.url, { maxConnections: 2 });
  const store = new WaitStore(db);
  const writer = new WaitWriter(store, logger);
  const http = createUndiciClient({ allowPrivateTargets: true, responseBodyBytes: 0 });
  const dispatcher = new Dispatcher(
    { broker: harness.broker, merchants: harness.merchants, http, logger, waits: { store, writer }, order: new OrderGate(new OrderStore(db), logger), failures: new FailedStore(db) },
    { prefix: harness.prefix, deliveryTimeoutMs: 2_000, concurrency: 16, maxMessageBytes: 65_536, drainTimeoutMs: 5_000, waitLeaseMs: 60_000, ...settings },
  );
  return {
    dispatcher,
    follow: () => circuitRows(db, store, dispatcher),
    async close() {
      await dispatcher.stop();
      writer.close();
      http.close();
      await db.close();
    },
  };
}
