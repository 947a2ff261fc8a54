import { type Database, deliveryLogQueries, DeliveryLogRecorder, openPostgres } from '../../libs/delivery-store/index.js';
import { FailedStore, ResendService } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * The first attempt, the retry and a resend from the delivery log's copy (a failure only the
 * recorder indexed) send the same bytes: the log stores the body as text, never as jsonb.
 */
describe('the bytes of a webhook, on every attempt, retry and resend', () => {
  let ok = false;
  let receiver: Receiver;
  let harness: Harness;
  let database: Database;
  let recorder: DeliveryLogRecorder;
  const merchant = testMerchant('m_bytes', 'http://placeholder');

  beforeAll(async () => {
    receiver = await Receiver.start(() => (ok ? 200 : 500));
    merchant.endpoints[0]!.url = receiver.url;
    harness = await startHarness({ name: 'exactbytes', merchants: [merchant], retryDelaysMs: [200], deliveryLog: true });
    // The log in the failure index's database, as deployed: the recorder indexes failures from it.
    database = openPostgres(harness.database.url);
    recorder = new DeliveryLogRecorder(harness.broker, database, silentLogger(), { prefix: harness.prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    await recorder.start();
  });

  afterAll(async () => {
    await recorder?.stop();
    await database?.close();
    await harness?.close();
    await receiver?.close();
  });

  it('keeps key order, 1.0, 1e2 and unicode escapes byte for byte, with one webhook-id', async () => {
    const reference = `PO-BYTES-${Date.now()}`;
    // Keys out of any sorted order, numbers JSON.parse and jsonb would rewrite, escapes they would decode.
    const data = `{"zeta": 1.0,"amount":1e2, "reference":"${reference}","note":"caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\/","alpha":[1.50,-0.0,12345678901234567890]}`;
    const upstream = `{"merchantId":"${merchant.id}","event":"payout","data":${data}}`;
    const sent = `{"event":"payout","data":${data}}`;
    await harness.test.publishRaw(harness.names.dispatch, Buffer.from(upstream), { messageId: 'evt_bytes_1' });
    await receiver.waitForRequests(2, 15_000);
    await waitFor(
      'failed, in the log and the failure index',
      async () => (await harness.database.query<{ status: string }>(`SELECT w.status FROM delivery_webhooks w JOIN failed_webhooks f USING (merchant_id, webhook_id)`))[0]?.status === 'failed',
      20_000,
    );
    expect((await harness.database.query<{ payload: string }>('SELECT payload FROM delivery_webhooks'))[0]?.payload).toBe(sent);
    // As if the dispatcher could not write the failure: only the recorder indexed it, with no message.
    await harness.database.query('UPDATE failed_webhooks SET content = NULL, headers = NULL');
    ok = true;
    const resend = new ResendService(harness.broker, new FailedStore(database), harness.prefix, silentLogger());
    await expect(resend.resend(merchant, reference)).resolves.toBe(1);
    const requests = await receiver.waitForRequests(3, 15_000);
    expect(requests.map((r) => r.body)).toEqual([sent, sent, sent]);
    expect(requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_bytes_1', 'evt_bytes_1', 'evt_bytes_1']);
    // The log's API answers it as JSON.
    await waitFor('delivered in the log', async () => (await deliveryLogQueries(database).getWebhook(merchant.id, 'evt_bytes_1'))?.status === 'delivered', 20_000);
    expect((await deliveryLogQueries(database).getWebhook(merchant.id, 'evt_bytes_1'))?.payload).toEqual(JSON.parse(sent));
  }, 60_000);
});
