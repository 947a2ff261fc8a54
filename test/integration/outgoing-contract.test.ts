import { createHmac } from 'node:crypto';
import { EVENT_NAMES, sampleEvent } from '../../libs/contracts/index.js';
import { TestBroker, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants } from '../support/merchant-rows.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { dispatcherEnv, startProgram } from '../support/process.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const DISPATCHER = 'dist/apps/dispatcher/main.js';

/**
 * DESIGN.md's external contract, end to end through the built dispatcher: an upstream team publishes
 * with any AMQP client to `<prefix>.events` (routing key = event name, persistent, JSON), and the
 * merchant's server receives a POST whose headers are computed as DESIGN.md "Outgoing webhook" says,
 * checked here with node:crypto alone, not with the library the dispatcher signs with.
 */
describe('the outgoing webhook, as the built dispatcher sends what upstream published', () => {
  const prefix = uniquePrefix('outgoing');
  let test: TestBroker;
  let database: TestDatabase;
  let receiver: Receiver;
  let dispatcher: ReturnType<typeof startProgram>;
  const merchant = testMerchant('m_contract', 'http://placeholder');

  beforeAll(async () => {
    test = await TestBroker.open();
    database = await createTestDatabase('outgoing');
    receiver = await Receiver.start(() => 204);
    merchant.endpoints[0]!.url = receiver.url;
    await seedMerchants(database.url, [merchant]);
    dispatcher = startProgram(DISPATCHER, dispatcherEnv(prefix, database.url));
    await waitFor('dispatcher consuming', async () => dispatcher.output.stdout.includes('dispatcher consuming'), 30_000);
  });

  afterAll(async () => {
    dispatcher?.child.kill('SIGTERM');
    await dispatcher?.finished;
    await test?.deleteTopology(prefix);
    await test?.close();
    await database?.drop();
    await receiver?.close();
  });

  it.each(EVENT_NAMES)('POSTs %s with content-type, a user-agent naming the service and v1 = base64 HMAC-SHA256 of id.timestamp.body', async (event) => {
    const message = sampleEvent(event, merchant.id);
    const messageId = `evt_contract_${event}`;
    const ch = await test.connection.createConfirmChannel();
    ch.publish(`${prefix}.events`, event, Buffer.from(JSON.stringify(message)), { persistent: true, contentType: 'application/json', messageId });
    await ch.waitForConfirms();
    await ch.close();

    await waitFor(`${event} received`, async () => receiver.requests.some((r) => r.headers['webhook-id'] === messageId), 15_000);
    const request = receiver.requests.find((r) => r.headers['webhook-id'] === messageId)!;
    expect(request.method).toBe('POST');
    expect(request.headers['content-type']).toBe('application/json');
    expect(request.headers['user-agent']).toMatch(/^nucleus-webhooks\//);
    expect(request.body).toBe(JSON.stringify({ event, data: message.data }));

    const timestamp = String(request.headers['webhook-timestamp']);
    expect(timestamp).toMatch(/^\d+$/);
    expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(60);
    const key = Buffer.from(merchant.endpoints[0]!.secret.slice('whsec_'.length), 'base64');
    const expected = createHmac('sha256', key).update(`${messageId}.${timestamp}.${request.body}`).digest('base64');
    expect(String(request.headers['webhook-signature']).split(' ')).toEqual([`v1,${expected}`]);
  });

  it.each(EVENT_NAMES)('sends %s for a failed outcome as for a successful one, the outcome in data.status (spec 6.2)', async (event) => {
    const message = sampleEvent(event, merchant.id);
    message.data.status = 'failed';
    const messageId = `evt_contract_failed_${event}`;
    const ch = await test.connection.createConfirmChannel();
    ch.publish(`${prefix}.events`, event, Buffer.from(JSON.stringify(message)), { persistent: true, contentType: 'application/json', messageId });
    await ch.waitForConfirms();
    await ch.close();
    await waitFor(`failed ${event} received`, async () => receiver.requests.some((r) => r.headers['webhook-id'] === messageId), 15_000);
    expect(JSON.parse(receiver.requests.find((r) => r.headers['webhook-id'] === messageId)!.body)).toEqual({ event, data: { ...message.data, status: 'failed' } });
  });
});
