import { resolve } from 'node:path';
import type { BrokerConnection } from '../../libs/broker/index.js';
import { type Database, DeliveryLogRecorder, openPglite } from '../../libs/delivery-store/index.js';
import type { Logger } from '../../libs/logger/index.js';
import { fileOf, migrate } from '../../libs/migrations/index.js';
import type { RecorderConfig } from './config.js';

/** Development mode's embedded database (git-ignored). */
export const PGLITE_DIR = resolve('.data/delivery-log');

/** Development mode's embedded database, migrated here: only this process can open it, so no operator can. */
export async function openDevDatabase(logger: Logger): Promise<Database> {
  const database = await openPglite(PGLITE_DIR);
  const { applied } = await migrate(database).catch(async (err: unknown) => {
    await database.close();
    throw err;
  });
  if (applied.length > 0) logger.info('development mode: embedded database migrated', { applied: applied.map(fileOf) });
  return database;
}

export type OpenedLog = Awaited<ReturnType<typeof openDeliveryLog>>;

/** The delivery log on the caller's database. An embedded PGlite only this process can open, so it also runs the recorder. */
export async function openDeliveryLog(config: Pick<RecorderConfig, 'DELIVERY_LOG_RETENTION' | 'TOPOLOGY_PREFIX'>, broker: BrokerConnection, logger: Logger, given: Database) {
  if (given.kind !== 'pglite') return { database: given, close: async () => {} };
  logger.warn('development mode: the delivery log uses an embedded PGlite database', { dir: PGLITE_DIR });
  const recorder = new DeliveryLogRecorder(broker, given, logger, { prefix: config.TOPOLOGY_PREFIX, retentionMs: config.DELIVERY_LOG_RETENTION });
  await recorder.start();
  return { database: given, recorder, close: () => recorder.stop() };
}
