import { fromWritten } from '../../apps/api/portal/endpoint-handlers.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EndpointSettings, MerchantSettings, PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { putWithEndpoint } from '../support/merchant-endpoints.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/**
 * What the portal answers after an endpoint write when its replica does not hold the write yet
 * (a NOTIFY behind): the write's own answer, which must tell an operator's disable from the
 * merchant's, and an endpoint named for every event from one that takes whatever there is.
 */
describe("the portal's view of an endpoint write its replica does not hold yet", () => {
  let db: TestDatabase;
  let database: Database;
  let directory: PgMerchantDirectory;
  let settings: MerchantSettings;

  beforeAll(async () => {
    db = await createTestDatabase('portal_written_view');
    database = openPostgres(db.url);
    directory = new PgMerchantDirectory(database, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger());
    await directory.start();
    settings = new MerchantSettings(directory, { allowHttp: true, allowPrivateTargets: false });
  });

  afterAll(async () => {
    await directory?.close();
    await database?.close();
    await db?.drop();
  });

  it("says operator for an endpoint the operator turned off whose description the merchant changed", async () => {
    const { view } = await putWithEndpoint(settings, 'm_opoff', { publicKey: 'pk_m_opoff_000000', url: 'https://opoff.example/h' });
    const endpoints = new EndpointSettings(settings);
    await endpoints.patch('m_opoff', view.id, { enabled: false }); // the operator's (admin API, CLI)
    const written = await endpoints.patch('m_opoff', view.id, { description: 'waiting for the platform' }, { by: 'merchant' });
    expect(fromWritten(written, undefined)).toMatchObject({ enabled: false, disabledReason: 'manual', disabledBy: 'operator' });
    const own = await endpoints.patch('m_opoff', view.id, { description: 'still off' }, { by: 'merchant' });
    expect(fromWritten(own, undefined).disabledBy).toBe('operator');
  });

  it('says merchant for one the merchant turned off, and all events only for one that names none', async () => {
    const { view } = await putWithEndpoint(settings, 'm_self', { publicKey: 'pk_m_self_000000', url: 'https://self.example/h', events: ['charge.completed', 'payout', 'refund.completed'] });
    const endpoints = new EndpointSettings(settings);
    const off = await endpoints.patch('m_self', view.id, { enabled: false }, { by: 'merchant' });
    expect(fromWritten(off, undefined)).toMatchObject({ disabledBy: 'merchant', allEvents: false });
    const all = await endpoints.patch('m_self', view.id, { events: null }, { by: 'merchant' });
    expect(fromWritten(all, undefined)).toMatchObject({ allEvents: true, events: ['charge.completed', 'payout', 'refund.completed'] });
  });
});
