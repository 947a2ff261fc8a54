import pg from 'pg';
import type { Queryable } from '../../libs/delivery-store/index.js';
import { type Merchant, SecretBox } from '../../libs/merchants/index.js';
import { CHANGES_CHANNEL, columnsOf, idDigest } from '../../libs/merchants/rows.js';

/** 32 bytes, base64: the tests' SECRETS_KEY. */
export const TEST_SECRETS_KEY = Buffer.from('test-secrets-key-32-bytes-long!!').toString('base64');

/**
 * A test's merchants, written straight into its database as rows the programs read (sealed with
 * TEST_SECRETS_KEY): the quick way to have merchants with given ids, keys and secrets, where the
 * admin API would make its own. One already there is replaced as a write would (its version up, a
 * notification on commit), so running programs hear of a change as they would of an admin write.
 */
export async function seedMerchants(database: string | Queryable, merchants: Merchant[]): Promise<void> {
  await onDatabase(database, async (db) => {
    const box = new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64'));
    for (const merchant of merchants) {
      await db.query(
        `INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3, $4, 1)
         ON CONFLICT (id) DO UPDATE SET public_key = EXCLUDED.public_key, endpoints = EXCLUDED.endpoints, secrets = EXCLUDED.secrets,
           version = merchants.version + 1, change_xid = pg_current_xact_id(), updated_at = now()`,
        [merchant.id, ...columnsOf(merchant, box)],
      );
      await db.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, merchant.id]);
    }
  });
}

/**
 * Merchants gone from the directory as one deleted over a day ago is: no row, and a tombstone past
 * its day (a program forgets the merchant, and no longer knows it was deleted: it is unknown).
 */
export async function forgetMerchants(database: string | Queryable, ids: string[]): Promise<void> {
  await onDatabase(database, async (db) => {
    for (const id of ids) {
      await db.query(
        `WITH gone AS (DELETE FROM merchants WHERE id = $1 RETURNING version)
         INSERT INTO merchant_tombstones (id_digest, version, deleted_at) SELECT $2, version, now() - interval '25 hours' FROM gone`,
        [id, idDigest(id)],
      );
      await db.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, id]);
    }
  });
}

async function onDatabase(database: string | Queryable, run: (db: Queryable) => Promise<void>): Promise<void> {
  if (typeof database !== 'string') return run(database);
  const client = new pg.Client({ connectionString: database });
  await client.connect();
  try {
    await run(client as unknown as Queryable);
  } finally {
    await client.end();
  }
}
