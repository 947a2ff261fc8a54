import { resolve } from 'node:path';
import type { BrokerConnection } from '../../libs/broker/index.js';
import { type Database, DeliveryLogRecorder, openPglite, openPostgres } from '../../libs/delivery-store/index.js';
import type { Logger } from '../../libs/logger/index.js';

/** Development mode's embedded database lives here (git-ignored). */
export const PGLITE_DIR = resolve('.data/delivery-log');

export interface OpenedLog {
  database: Database;
  /** Set when this process runs the recorder because it owns the embedded database. */
  recorder?: DeliveryLogRecorder;
  close(): Promise<void>;
}

interface LogConfig {
  DATABASE_URL?: string;
  DELIVERY_LOG_RETENTION: number;
  TOPOLOGY_PREFIX: string;
}

/**
 * The delivery log's database for a program that reads it. With DATABASE_URL, PostgreSQL; without
 * (development mode only, config enforces it), an embedded PGlite that only this process can
 * open, so this process also runs the recorder that fills it.
 */
export async function openDeliveryLog(config: LogConfig, broker: BrokerConnection, logger: Logger, given?: Database): Promise<OpenedLog> {
  if (given) return { database: given, close: async () => {} };
  if (config.DATABASE_URL) {
    const database = openPostgres(config.DATABASE_URL);
    return { database, close: () => database.close() };
  }
  logger.warn('development mode: the delivery log uses an embedded PGlite database', { dir: PGLITE_DIR });
  const database = await openPglite(PGLITE_DIR);
  const recorder = new DeliveryLogRecorder(broker, database, logger, { prefix: config.TOPOLOGY_PREFIX, retentionMs: config.DELIVERY_LOG_RETENTION });
  await recorder.start();
  return {
    database,
    recorder,
    close: async () => {
      await recorder.stop();
      await database.close();
    },
  };
}
