import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type Database, erasedMerchantSql, openPostgres, type Queryable } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { deleteMerchantData, MerchantSettings, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { startDatabaseDispatcher, TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { putWithEndpoint } from '../support/merchant-endpoints.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A merchant deleted (`webhooks merchants delete`) and made again with the same id within the day
 * is a new merchant: its webhooks are delivered and logged as any other's, and nothing of the
 * deleted one comes back into its log (docs/production.md "Deleting a merchant's data").
 */
describe('a merchant deleted and made again with the same id', () => {
  const prefix = uniquePrefix('made-again');
  let db: TestDatabase;
  let database: Database;
  let directory: PgMerchantDirectory;
  let settings: MerchantSettings;
  let receiver: Receiver;
  let test: TestBroker;
  let upstream: BrokerConnection;
  const programs: DispatcherProgram[] = [];
  const box = () => new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64'));
  const guards = { allowHttp: true, allowPrivateTargets: true };

  beforeAll(async () => {
    db = await createTestDatabase('made_again');
    database = openPostgres(db.url);
    directory = new PgMerchantDirectory(database, box(), silentLogger());
    await directory.start();
    settings = new MerchantSettings(directory, guards);
    receiver = await Receiver.start(() => 200);
    test = await TestBroker.open();
    upstream = new BrokerConnection({ url: brokerUrl(), name: 'test-made-again-upstream', logger: silentLogger() });
    await upstream.open(10_000);
  }, 60_000);

  afterAll(async () => {
    for (const program of programs.reverse()) await program.stop();
    await upstream?.close();
    await directory?.close();
    await database?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await receiver?.close();
    await db?.drop();
  });

  it("is kept by the delete's second sweep when made again before it", async () => {
    await putWithEndpoint(settings, 'm_swept', { publicKey: 'pk_swept_000001', url: receiver.url });
    const deleting = deleteMerchantData(database, 'm_swept', { actor: 'test' }, { sweepAfterMs: 1_500 });
    await waitFor('the first pass committed', async () => (await db.query('SELECT 1 FROM merchants WHERE id = $1', ['m_swept'])).length === 0, 10_000, 20);
    await putWithEndpoint(settings, 'm_swept', { publicKey: 'pk_swept_000002', url: receiver.url });
    await deleting;
    expect(await db.query('SELECT public_key FROM merchants WHERE id = $1', ['m_swept'])).toEqual([{ public_key: 'pk_swept_000002' }]);
  });

  it("leaves out a record of the deleted one's, from before the delete, read after it is made again", async () => {
    await putWithEndpoint(settings, 'm_logged', { publicKey: 'pk_logged_00001', url: receiver.url });
    const before = new Date(Date.now() - 60_000);
    await deleteMerchantData(database, 'm_logged', { actor: 'test' }, { sweepAfterMs: 0 });
    await putWithEndpoint(settings, 'm_logged', { publicKey: 'pk_logged_00002', url: receiver.url });
    // The recorder's batch keeps a record unless this is true (libs/delivery-store/materialise.ts).
    const erased = async (at: Date) => (await db.query<{ erased: boolean }>(`SELECT ${erasedMerchantSql('$1::text', '$2::timestamptz')} AS erased`, ['m_logged', at]))[0]!.erased;
    expect(await erased(before)).toBe(true);
    expect(await erased(new Date(Date.now() + 60_000))).toBe(false);
  });

  it("delivers the new merchant's webhook taken by a dispatcher that has not heard it was made again", async () => {
    const dispatcher = await startDatabaseDispatcher(prefix, db.url, {}, { merchantsPollMs: 3_600_000 });
    programs.push(dispatcher);
    await putWithEndpoint(settings, 'm_again', { publicKey: 'pk_again_000001', url: receiver.url });
    await waitFor('the dispatcher knows the merchant', () => dispatcher.merchants.byId('m_again')?.endpoints.length === 1, 15_000);
    await deleteMerchantData(database, 'm_again', { actor: 'test' }, { sweepAfterMs: 0 });
    await waitFor('the dispatcher heard of the delete', () => dispatcher.merchants.byId('m_again') === undefined, 15_000);
    // Made again by a write whose notification is lost (a pooler in transaction mode): no poll for an hour.
    // The merchant and its endpoint in one commit: the dispatcher's directory may still be polling
    // after the delete's notifications, and a poll between two commits would hold the merchant
    // without its endpoint (not erased: its webhook skipped), which no notification corrects.
    await database.transaction(async (outer) => {
      const deafDatabase = {
        transaction: <T>(work: (tx: Queryable) => Promise<T>) => work({ query: (text, params) => (text.includes('pg_notify') ? Promise.resolve({ rows: [] }) : outer.query(text, params)) as never }),
      } as unknown as Database;
      const deaf = new PgMerchantDirectory(deafDatabase, box(), silentLogger());
      await putWithEndpoint(new MerchantSettings(deaf, guards), 'm_again', { publicKey: 'pk_again_000002', url: receiver.url });
    });
    const { messageId } = await new EventPublisher(upstream, prefix).publish(sampleEvent('payout', 'm_again'));
    await waitFor('the webhook settled', () => dispatcher.dispatcher.stats.erased + dispatcher.dispatcher.stats.delivered + dispatcher.dispatcher.stats.invalid >= 1, 30_000).catch((err: Error) => {
      throw new Error(`${err.message}: stats ${JSON.stringify(dispatcher.dispatcher.stats)}, held ${JSON.stringify(dispatcher.merchants.byId('m_again') ?? null)}`);
    });
    expect(dispatcher.dispatcher.stats.erased).toBe(0);
    await waitFor('the webhook delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === messageId), 15_000);
  }, 60_000);
});
