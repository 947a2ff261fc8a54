import { readFileSync } from 'node:fs';
import { type Database, openPostgres, type Queryable } from '../delivery-store/index.js';
import type { Logger } from '../logger/index.js';
import { type PgDirectoryOptions, PgMerchantDirectory } from './pg-directory.js';
import { columnsOf } from './rows.js';
import { type Merchant, merchantsFileSchema } from './schema.js';
import { SecretBox } from './secret-box.js';

interface OpenMerchantsOptions extends PgDirectoryOptions {
  /** A database the caller opened (npm start shares one PGlite); else DATABASE_URL. */
  database?: Database;
  applicationName: string;
  signal?: AbortSignal;
  /** Merchants an embedded (PGlite) database starts with. */
  seedFile?: string;
  connectTimeoutMs?: number;
}

/** The merchant directory, loaded and kept current, and its pool (the limits shared by API replicas use it too). */
export async function openMerchants(
  config: { DATABASE_URL?: string; SECRETS_KEY?: Buffer; SECRETS_KEY_PREVIOUS?: Buffer },
  logger: Logger,
  options: OpenMerchantsOptions,
) {
  // A small pool of its own: writes and the limits' counters, never the delivery log's reads.
  const database = options.database ?? openPostgres(config.DATABASE_URL!, { maxConnections: 4, connectTimeoutMs: options.connectTimeoutMs ?? 2_000, statementTimeoutMs: 10_000, applicationName: options.applicationName });
  const box = new SecretBox(config.SECRETS_KEY!, config.SECRETS_KEY_PREVIOUS ? [config.SECRETS_KEY_PREVIOUS] : []);
  const directory = new PgMerchantDirectory(database, box, logger, options);
  const close = async () => {
    await directory.close();
    if (!options.database) await database.close();
  };
  try {
    if (options.seedFile && database.kind === 'pglite') await seedMerchants(database, box, options.seedFile, logger);
    await directory.start(options.signal);
  } catch (err) {
    await close();
    throw err;
  }
  return { merchants: directory, database, close };
}

/** With the file's secrets, so that the demo merchant verifies what it receives; one already there is left as it is. */
async function seedMerchants(database: Queryable, box: SecretBox, file: string, logger: Logger): Promise<void> {
  const seeded: string[] = [];
  for (const merchant of readMerchantsFile(file)) {
    const { rows } = await database.query(
      'INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3, $4, 1) ON CONFLICT DO NOTHING RETURNING id',
      [merchant.id, ...columnsOf(merchant, box)],
    );
    if (rows.length > 0) seeded.push(merchant.id);
  }
  if (seeded.length > 0) logger.info('development merchants written to the embedded database', { written: seeded });
}

export function readMerchantsFile(file: string): Merchant[] {
  return merchantsFileSchema.parse(JSON.parse(readFileSync(file, 'utf8'))).merchants;
}
