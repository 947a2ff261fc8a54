import { readFileSync } from 'node:fs';
import { type Database, openPostgres, type Queryable } from '../delivery-store/index.js';
import type { Logger } from '../logger/index.js';
import { type PgDirectoryOptions, PgMerchantDirectory } from './pg-directory.js';
import { columnsOf } from './rows.js';
import { type Merchant, merchantsFileSchema } from './schema.js';
import { SecretBox } from './secret-box.js';

export interface OpenMerchantsOptions extends PgDirectoryOptions {
  /** A database the caller opened (npm start shares one PGlite); else DATABASE_URL. */
  database?: Database;
  /** Names this program's connections in pg_stat_activity. */
  applicationName: string;
  signal?: AbortSignal;
  /** Merchants an embedded (PGlite) database starts with: development mode's demo merchants. */
  seedFile?: string;
  /** How long a new connection may take (2 s; the CLI, which a person waits for, allows longer). */
  connectTimeoutMs?: number;
}

/**
 * Opens the merchant directory in PostgreSQL (libs/config/merchants.ts), loaded and kept current;
 * `database` is its pool (the limits shared by API replicas use it too).
 */
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

/**
 * Development mode's embedded database starts with the development merchants, with the file's
 * secrets so that the demo merchant verifies what it receives. One already there (or whose public
 * key another holds) is left as it is.
 */
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

/** The merchants of a JSON file of merchantsFileSchema's shape: development mode's, which seed its embedded database. */
export function readMerchantsFile(file: string): Merchant[] {
  return merchantsFileSchema.parse(JSON.parse(readFileSync(file, 'utf8'))).merchants;
}
