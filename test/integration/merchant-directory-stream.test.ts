import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { BrokerMerchantDirectory } from '../../libs/merchants/index.js';
import { appendSettingsEntry } from '../../libs/merchants/settings-entries.js';
import { declareTopology, topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { waitFor } from '../support/wait.js';

const DAY = 86_400_000;

/** The merchants stream's own rules: versions, refreshes ahead of retention, replay. */
describe('the broker merchant directory', () => {
  const prefix = uniquePrefix('merchant-stream');
  const stream = topologyNames(prefix).merchants;
  let broker: BrokerConnection;
  let clock = Date.parse('2026-01-01T00:00:00Z');
  const open: BrokerMerchantDirectory[] = [];

  async function directory(): Promise<BrokerMerchantDirectory> {
    const dir = new BrokerMerchantDirectory(broker, stream, silentLogger(), { now: () => new Date(clock), refreshAfterMs: 30 * DAY, refreshCheckMs: 3_600_000 });
    open.push(dir);
    await dir.start();
    await dir.waitUntilReady(10_000);
    return dir;
  }

  beforeAll(async () => {
    broker = new BrokerConnection({
      url: brokerUrl(),
      name: 'test-merchant-stream',
      logger: silentLogger(),
      declare: (openChannel) => declareTopology(openChannel, { prefix, retryDelaysMs: [], failedRetention: '1D', merchantsStream: true }),
    });
    await broker.open(10_000);
  });

  afterAll(async () => {
    for (const dir of open) await dir.close();
    await broker?.close();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix, 0);
    await test.channel.deleteQueue(stream).catch(() => {});
    await test.close();
  });

  it('writes again only the merchants older than the refresh age, and a refresh never undoes a newer change', async () => {
    const a = await directory();
    const m1 = testMerchant('m_old', 'https://hooks.example.com/old');
    const m2 = testMerchant('m_new', 'https://hooks.example.com/new');
    await a.update('m_old', () => m1);
    clock += 20 * DAY;
    await a.update('m_new', () => m2);
    clock += 11 * DAY;
    // m_old is 31 days old, m_new 11: only m_old is written again.
    expect(await a.refresh()).toBe(1);
    expect(await a.refresh()).toBe(0);

    const b = await directory();
    const changed = { ...m1, webhook: { ...m1.webhook!, enabled: false } };
    await a.update('m_old', () => changed);
    await waitFor('b applied the change', () => b.byId('m_old')?.webhook?.enabled === false, 5_000);
    clock += 31 * DAY;
    expect(await b.refresh()).toBe(2);
    // A replica that had not seen the change yet refreshes what it knew: version 1 of m_old, the
    // one before the change (version 2). It comes later in the stream and must not undo the change.
    await appendSettingsEntry(broker, stream, {
      merchantId: 'm_old',
      version: 1,
      entryId: 'stale-refresh',
      writtenAt: new Date(clock).toISOString(),
      kind: 'refresh',
      merchant: m1,
    }, 5_000);

    // A replica replaying the whole stream ends with the latest settings of each merchant.
    const c = await directory();
    expect(c.list().map((m) => [m.id, m.webhook?.enabled])).toEqual([
      ['m_new', true],
      ['m_old', false],
    ]);
    expect(c.byPublicKey(m1.publicKey)?.id).toBe('m_old');
  });

  it('keeps the first entry of a version: a writer that lost the race for it changes nothing', async () => {
    const a = await directory();
    const m = testMerchant('m_race', 'https://hooks.example.com/race');
    await a.update('m_race', () => m);
    // Another replica wrote version 2 from the same version 1 a moment after a's own version 2:
    // in stream order it comes second, so it must not replace a's change.
    const winner = await a.update('m_race', (current) => ({ ...current!, webhook: { ...current!.webhook!, enabled: false } }));
    expect(winner.merchant.webhook?.enabled).toBe(false);
    await appendSettingsEntry(broker, stream, {
      merchantId: 'm_race',
      version: 2,
      entryId: 'lost-the-race',
      writtenAt: new Date(clock).toISOString(),
      kind: 'change',
      merchant: { ...m, webhook: { ...m.webhook!, url: 'https://hooks.example.com/loser' } },
    }, 5_000);
    // A replica that starts now has read every entry up to its checkpoint, the loser's included.
    const b = await directory();
    expect(b.byId('m_race')?.webhook).toMatchObject({ enabled: false, url: 'https://hooks.example.com/race' });
  });

  it('answers from the latest write on every replica, and one that re-keys a merchant frees its old public key', async () => {
    const [a, b] = [await directory(), await directory()];
    const m = testMerchant('m_key', 'https://hooks.example.com/key');
    await a.update('m_key', () => m);
    await a.update('m_key', (current) => ({ ...current!, publicKey: 'pk_rekeyed_01' }));
    await waitFor('b applied both', () => b.byId('m_key')?.publicKey === 'pk_rekeyed_01', 5_000);
    expect(b.byPublicKey(m.publicKey)).toBeUndefined();
    expect(b.byPublicKey('pk_rekeyed_01')?.id).toBe('m_key');
  });
});
