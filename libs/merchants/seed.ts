import { readFileSync } from 'node:fs';
import type { Queryable } from '../delivery-store/index.js';
import type { Logger } from '../logger/index.js';
import { columnsOf } from './rows.js';
import { merchantsFileSchema } from './schema.js';
import type { SecretBox } from './secret-box.js';

/**
 * Development mode's embedded database starts with the development merchants, with the file's
 * secrets so that the demo merchant verifies what it receives. One already there (or whose public
 * key another holds) is left as it is.
 */
export async function seedMerchants(database: Queryable, box: SecretBox, file: string, logger: Logger): Promise<string[]> {
  const { merchants } = merchantsFileSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  const seeded: string[] = [];
  for (const merchant of merchants) {
    const { rows } = await database.query(
      'INSERT INTO merchants (id, public_key, endpoints, secrets, version) VALUES ($1, $2, $3, $4, 1) ON CONFLICT DO NOTHING RETURNING id',
      [merchant.id, ...columnsOf(merchant, box)],
    );
    if (rows.length > 0) seeded.push(merchant.id);
  }
  if (seeded.length > 0) logger.info('development merchants written to the embedded database', { written: seeded });
  return seeded;
}
