import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { BrokerMerchantDirectory, MerchantSettings } from '../../libs/merchants/index.js';
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
  const closeAfter: BrokerConnection[] = [];

  async function directory(): Promise<BrokerMerchantDirectory> {
    const dir = new BrokerMerchantDirectory(broker, stream, silentLogger(), { now: () => new Date(clock), refreshAfterMs: 30 * DAY, refreshCheckMs: 3_600_000 });
    open.push(dir);
    await dir.start();
    await dir.waitUntilReady(10_000);
    return dir;
  }

  /**
   * A directory on a connection of its own whose stream deliveries pass through `tap` first: it
   * may hand one on (`deliver`), hold it for later or drop it, as a busy or stalled process would.
   */
  async function tappedDirectory(name: string, tap: (deliver: () => void) => void, options: { writeTimeoutMs?: number } = {}): Promise<BrokerMerchantDirectory> {
    const tapped = new BrokerConnection({ url: brokerUrl(), name, logger: silentLogger() });
    await tapped.open(10_000);
    closeAfter.push(tapped);
    const realConsume = tapped.consume.bind(tapped);
    tapped.consume = (queue, consumeOptions) =>
      realConsume(queue, { ...consumeOptions, onMessage: (delivery) => tap(() => consumeOptions.onMessage(delivery)) });
    const dir = new BrokerMerchantDirectory(tapped, stream, silentLogger(), { now: () => new Date(clock), ...options });
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
    for (const other of closeAfter) await other.close();
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

  it('applies a write once that won its version, even when the next version is read back with it', async () => {
    // A replica whose tail reads its own entry and another replica's next version in one go (one
    // socket read on a busy process): its write won, and must not be taken for a lost race and
    // applied again on top of the other (seen as a rotation applied twice: its secret in its own grace).
    let held: Array<() => void> | undefined;
    const a = await tappedDirectory('test-merchant-stream-held', (deliver) => (held ? held.push(deliver) : deliver()));
    const b = await directory();
    await b.update('m_twice', () => testMerchant('m_twice', 'https://hooks.example.com/twice'));
    await waitFor('a read version 1', () => a.byId('m_twice') !== undefined, 5_000);

    held = [];
    let applied = 0;
    const written = a.update('m_twice', (current) => {
      applied++;
      return { ...current!, webhook: { ...current!.webhook!, url: `${current!.webhook!.url}/a` } };
    });
    await waitFor('b read a\'s version 2', () => b.byId('m_twice')?.webhook?.url.endsWith('/a'), 5_000);
    await b.update('m_twice', (current) => ({ ...current!, webhook: { ...current!.webhook!, enabled: false } }));
    const deliveries = held;
    held = undefined;
    for (const deliver of deliveries) deliver();

    expect((await written).merchant.webhook?.url).toBe('https://hooks.example.com/twice/a');
    expect(applied).toBe(1);
    const c = await directory();
    expect(c.byId('m_twice')?.webhook).toMatchObject({ url: 'https://hooks.example.com/twice/a', enabled: false });
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

  it('gives a public key to the merchant whose entry came first, on every replica and every replay', async () => {
    const a = await directory();
    const first = testMerchant('m_owner', 'https://hooks.example.com/owner');
    // Two replicas that both read the key as free: each appends its merchant with it.
    await appendSettingsEntry(broker, stream, { merchantId: 'm_owner', version: 1, entryId: 'owner-1', writtenAt: new Date(clock).toISOString(), kind: 'change', merchant: first }, 5_000);
    await appendSettingsEntry(broker, stream, {
      merchantId: 'm_squatter',
      version: 1,
      entryId: 'squatter-1',
      writtenAt: new Date(clock).toISOString(),
      kind: 'change',
      merchant: testMerchant('m_squatter', 'https://hooks.example.com/squatter', { publicKey: first.publicKey }),
    }, 5_000);
    const b = await directory();
    for (const dir of [a, b]) {
      await waitFor('entries read', () => dir.byId('m_owner') !== undefined, 5_000);
      expect(dir.byPublicKey(first.publicKey)?.id).toBe('m_owner');
      expect(dir.byId('m_squatter')).toBeUndefined();
    }
    // The refused merchant can still be created with a key of its own, at the version it would have had.
    const own = testMerchant('m_squatter', 'https://hooks.example.com/squatter');
    const written = await b.update('m_squatter', () => own);
    expect(written.created).toBe(true);
    await waitFor('a applied it', () => a.byPublicKey(own.publicKey)?.id === 'm_squatter', 5_000);
  });

  it('answers a retry with the key of a write that timed out but was stored, secret included, and writes nothing again', async () => {
    const policy = { allowHttp: false, allowPrivateTargets: false };
    // A replica whose write is stored but not read back in time: its caller got a 503. Its tail
    // stops receiving once ready, so the read-back surely times out (a 1 ms deadline did not:
    // on a busy machine the confirm and the read-back can both arrive before the timer runs).
    let frozen = false;
    const slow = await tappedDirectory('test-merchant-stream-slow', (deliver) => (frozen ? undefined : deliver()), { writeTimeoutMs: 500 });
    frozen = true;
    const input = { publicKey: 'pk_timeout_01', webhook: { url: 'https://hooks.example.com/timeout', enabled: true } };
    await expect(new MerchantSettings(slow, policy).put('m_timeout', input, 'key-timeout-1')).rejects.toThrow();

    const b = await directory();
    await waitFor('the timed-out write is stored', () => b.byId('m_timeout'), 5_000);
    const retried = await new MerchantSettings(b, policy).put('m_timeout', input, 'key-timeout-1');
    expect(retried).toMatchObject({ replayed: true, created: true, secret: b.byId('m_timeout')!.webhook!.secret });
    // Nothing written again: the version is still the first one.
    const again = await b.update('m_timeout', (current) => current);
    expect(again.merchant.webhook?.secret).toBe(retried.secret);
  });

  it('reads up to now before refusing a write: a merchant created on another replica a moment ago can be changed at once', async () => {
    const b = await directory();
    const settings = new MerchantSettings(b, { allowHttp: false, allowPrivateTargets: false });
    const refused: string[] = [];
    for (let i = 0; i < 20; i++) {
      const merchant = testMerchant(`m_fresh_${i}`, 'https://hooks.example.com/fresh');
      // Another replica's write, confirmed by the broker: b may not have been delivered it yet.
      await appendSettingsEntry(broker, stream, { merchantId: merchant.id, version: 1, entryId: `fresh-${i}`, writtenAt: new Date(clock).toISOString(), kind: 'change', merchant }, 5_000);
      try {
        await settings.patch(merchant.id, { webhook: { enabled: false } });
      } catch (err) {
        refused.push(`${merchant.id}: ${(err as Error).message}`);
      }
    }
    expect(refused).toEqual([]);
  });
});
