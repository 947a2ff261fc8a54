import type { ApiOptions, ApiProgram } from '../../apps/api/program.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { type Database, DeliveryLogRecorder, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { startTestApi } from './api.js';
import { brokerUrl, TestBroker, uniquePrefix } from './broker.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';
import { waitFor } from './wait.js';

/** The delivery log end to end: a writer (the dispatcher's), the recorder into a database of its own, and an API reading it. */
export interface LogApi {
  prefix: string;
  db: TestDatabase;
  writer: DeliveryRecorder;
  recorder: DeliveryLogRecorder;
  api: ApiProgram;
  close(): Promise<void>;
}

export async function startLogApi(name: string, merchants: Merchant[], options: ApiOptions = {}): Promise<LogApi> {
  const prefix = uniquePrefix(name);
  const db = await createTestDatabase(name.replaceAll('-', '_'));
  const broker = new BrokerConnection({ url: brokerUrl(), name: `${name}-test`, logger: silentLogger() });
  await broker.open();
  const writer = new DeliveryRecorder(broker, silentLogger(), { prefix });
  await writer.start();
  const database: Database = openPostgres(db.url);
  const recorder = new DeliveryLogRecorder(broker, database, silentLogger(), { prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
  await recorder.start();
  // Its tables are made once it leads, in the background: asked before, they do not exist yet.
  await waitFor('the recorder leading', () => recorder.state.leading, 30_000);
  const api = await startTestApi(prefix, merchants, options, { DATABASE_URL: db.url, DELIVERY_LOG: 'on' });
  return {
    prefix,
    db,
    writer,
    recorder,
    api,
    async close() {
      await api.stop();
      await writer.stop();
      await recorder.stop();
      await database.close();
      await broker.close();
      const test = await TestBroker.open();
      await test.deleteTopology(prefix);
      await test.close();
      await db.drop();
    },
  };
}
