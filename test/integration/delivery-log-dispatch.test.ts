import type { ApiProgram } from '../../apps/api/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { deliveryLogQueries, DeliveryLogRecorder, openPostgres, type Database } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { call, startTestApi, token } from '../support/api.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

interface Listed { webhookId: string; status: string; attempts: number; lastHttpStatus: number | null }
interface Detailed { records: Array<{ outcome: string; attemptNumber: number; httpStatus: number | null; reason: string | null }> }

/** The real dispatcher writes the log: what the receiver saw is what the list, the detail and the feed say. */
describe('the delivery log written by the dispatcher', () => {
  let receiver: Receiver;
  let harness: Harness;
  let db: TestDatabase;
  let database: Database;
  let recorder: DeliveryLogRecorder;
  let api: ApiProgram;
  const alice = testMerchant('m_log_alice', 'http://placeholder');
  const carol = testMerchant('m_log_carol', 'http://placeholder', {});

  const get = async (merchant: typeof alice, path: string) =>
    call(api, path, { method: 'GET', headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` } });

  beforeAll(async () => {
    receiver = await Receiver.start(failOnceThenSucceed());
    alice.endpoints[0]!.url = `${receiver.url}/alice`;
    carol.endpoints[0] = { ...carol.endpoints[0]!, url: `${receiver.url}/carol`, enabled: false };
    harness = await startHarness({ name: 'log-dispatch', merchants: [alice, carol], retryDelaysMs: [200], deliveryLog: true });
    db = await createTestDatabase('log_dispatch');
    database = openPostgres(db.url);
    recorder = new DeliveryLogRecorder(harness.broker, database, silentLogger(), { prefix: harness.prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    await recorder.start();
    // Its tables are made once it leads, in the background: asked before, they do not exist yet
    // (met with the test files in parallel on a 2-core machine).
    await waitFor('the recorder leading', () => recorder.state.leading, 30_000);
    api = await startTestApi(harness.prefix, [alice, carol], {}, { DATABASE_URL: db.url, DELIVERY_LOG: 'on' });
  });

  afterAll(async () => {
    await api?.stop();
    await recorder?.stop();
    await database?.close();
    await harness?.close();
    await receiver?.close();
    await db?.drop();
  });

  it('shows a failing-then-recovering webhook with both attempts as the receiver saw them, and a disabled merchant\'s as skipped', async () => {
    const charge = sampleEvent('charge.completed', alice.id);
    const { messageId } = await harness.publisher.publish(charge);
    await harness.publisher.publish(sampleEvent('payout', carol.id));
    const seen = await receiver.waitForRequests(2, 15_000);
    expect(seen.map((r) => r.headers['webhook-id'])).toEqual([messageId, messageId]);
    await waitFor('the log holds three records', async () => (await db.query<{ n: string }>('SELECT count(*) AS n FROM delivery_records'))[0]?.n === '3', 20_000);

    const list = await get(alice, '/nucleus/webhooks');
    expect(list.status).toBe(200);
    const webhooks = (list.body as { data: { webhooks: Listed[] } }).data.webhooks;
    expect(webhooks).toMatchObject([{ webhookId: messageId, status: 'delivered', attempts: 2, lastHttpStatus: 204 }]);

    const detail = await get(alice, `/nucleus/webhooks/${messageId}`);
    const records = (detail.body as { data: Detailed }).data.records;
    expect(records.map((r) => [r.outcome, r.attemptNumber, r.httpStatus])).toEqual([
      ['retrying', 1, 500],
      ['delivered', 2, 204],
    ]);
    expect((detail.body as { data: { payload: unknown } }).data.payload).toEqual(JSON.parse(JSON.stringify({ event: charge.event, data: charge.data })));

    const feed = await get(alice, '/nucleus/events');
    expect((feed.body as { data: { events: Array<{ webhookId: string; status: string }> } }).data.events.map((e) => [e.webhookId, e.status])).toEqual([[messageId, 'delivered']]);

    const carolFeed = await get(carol, '/nucleus/events');
    expect((carolFeed.body as { data: { events: Array<{ status: string; webhookId: string }> } }).data.events).toMatchObject([{ status: 'skipped' }]);
    expect(JSON.stringify(carolFeed.body)).not.toContain(messageId);
    expect(harness.dispatcher.recordsLost).toBe(0);
  });
});
