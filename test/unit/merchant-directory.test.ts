import { writeFileSync } from 'node:fs';
import { FileMerchantDirectory, MerchantsFileError } from '../../libs/merchants/index.js';
import { createLogger } from '../../libs/logger/index.js';
import { testMerchant, writeMerchantsFile } from '../support/harness.js';
import { waitFor } from '../support/wait.js';

describe('the merchants file', () => {
  const logger = createLogger({ level: 'error', service: 'test', silent: true });

  it('picks up a changed file without a restart', async () => {
    const first = testMerchant('m_1', 'https://one.example/hooks');
    const file = writeMerchantsFile([first]);
    const directory = new FileMerchantDirectory(file, logger).watch(20);
    try {
      const second = testMerchant('m_2', 'https://two.example/hooks');
      writeFileSync(file, JSON.stringify({ merchants: [first, second] }));
      await waitFor('m_2 loaded', () => directory.byId('m_2') !== undefined, 5_000);
      expect(directory.byPublicKey(second.publicKey)?.id).toBe('m_2');
    } finally {
      await directory.close();
    }
  });

  it('refuses an invalid new file and keeps the last good one in force', () => {
    const merchant = testMerchant('m_keep', 'https://keep.example/hooks');
    const file = writeMerchantsFile([merchant]);
    const directory = new FileMerchantDirectory(file, logger);
    for (const broken of ['{ not json', JSON.stringify({ merchants: [{ id: 'x' }] }), JSON.stringify({ merchants: [merchant, merchant] })]) {
      writeFileSync(file, broken);
      expect(directory.reload()).toBe(false);
      expect(directory.byId('m_keep')?.endpoints[0]?.url).toBe('https://keep.example/hooks');
    }
  });

  // JSON.parse's own message quotes the text around a syntax error: next to a secret, part of it.
  const secret = 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0';
  const around = (text: string) => `{"merchants":[{"id":"m","publicKey":"pk_test_12345678","endpoints":[{"id":"ep_1","url":"https://x.example","enabled":true,${text}]}]}`;
  it.each([
    ['a secret without its quotes', around(`"secret":${secret}}`)],
    ['a secret in single quotes', around(`"secret":'${secret}'}`)],
    ['a comma after the last endpoint', around(`"secret":"${secret}"},`)],
  ])('refuses a file that is not JSON (%s) without quoting a character of it', (_name, text) => {
    const file = writeMerchantsFile([]);
    writeFileSync(file, text);
    expect(() => new FileMerchantDirectory(file, logger)).toThrow(/is not JSON \(a syntax error/);
    let message = '';
    try {
      new FileMerchantDirectory(file, logger);
    } catch (err) {
      message = (err as Error).message;
    }
    for (let i = 0; i + 4 <= secret.length; i++) expect(message).not.toContain(secret.slice(i, i + 4));
  });

  it.each([
    [{ merchants: [{ id: 'm', publicKey: 'pk_test_12345678', endpoints: [{ id: 'ep_x_main', url: 'ftp://x.example', enabled: true, secret: 'whsec_MDEyMzQ1Njc4OWFiY2RlZg==' }] }] }, 'merchants.0.endpoints.0.url: webhook.url must be an http(s) URL'],
    [{ merchants: [{ id: 'm', publicKey: 'short' }] }, 'merchants.0.publicKey: publicKey must be at least 8 characters'],
    [{ merchants: [{ id: 'a', publicKey: 'pk_test_same_key' }, { id: 'b', publicKey: 'pk_test_same_key' }] }, 'merchants.1.publicKey: duplicate publicKey'],
    [{ merchants: {} }, 'merchants: '],
    [{ merchants: [{ id: 'm', publicKey: 'pk_test_12345678', endpoints: [{ url: 'https://x.example', enabled: true, secret: 'whsec_MDEyMzQ1Njc4OWFiY2RlZg==' }] }] }, 'merchants.0.endpoints.0.id: '],
    [{ merchants: [{ id: 'm', publicKey: 'pk_test_12345678', endpoints: [{ id: 'wh_1', url: 'https://x.example', enabled: true, secret: 'whsec_MDEyMzQ1Njc4OWFiY2RlZg==' }] }] }, 'merchants.0.endpoints.0.id: endpoint id must be ep_'],
  ])('refuses %j at start-up, naming the field', (content, message) => {
    const file = writeMerchantsFile([]);
    writeFileSync(file, JSON.stringify(content));
    expect(() => new FileMerchantDirectory(file, logger)).toThrow(MerchantsFileError);
    expect(() => new FileMerchantDirectory(file, logger)).toThrow(message);
  });
});
