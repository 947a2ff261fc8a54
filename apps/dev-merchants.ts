import { readFileSync } from 'node:fs';
import type { BrokerConnection } from '../libs/broker/index.js';
import type { Logger } from '../libs/logger/index.js';
import { BrokerMerchantDirectory, merchantsFileSchema } from '../libs/merchants/index.js';

/**
 * Development mode with MERCHANT_DIRECTORY=broker: writes the development merchants (m_demo, …)
 * into the merchants stream unless they are there already, with the file's secrets so the demo
 * merchant verifies what it receives. Without this, `npm start` would announce the demo merchants
 * and then park m_demo's events as unknown-merchant. A merchant already in the stream is left as
 * it is (an operator may have changed it); a public key another merchant holds is not taken.
 */
export async function seedDevMerchants(broker: BrokerConnection, stream: string, file: string, logger: Logger): Promise<string[]> {
  const { merchants } = merchantsFileSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  const directory = new BrokerMerchantDirectory(broker, stream, logger);
  const seeded: string[] = [];
  try {
    await directory.start();
    await directory.waitUntilReady(60_000);
    for (const merchant of merchants) {
      const holder = directory.byPublicKey(merchant.publicKey);
      if (holder && holder.id !== merchant.id) {
        logger.warn('development merchant not seeded: another merchant has its public key', { merchantId: merchant.id, holder: holder.id });
        continue;
      }
      const { created } = await directory.update(merchant.id, (current) => (current ? undefined : merchant));
      if (created) seeded.push(merchant.id);
    }
  } finally {
    await directory.close();
  }
  return seeded;
}
