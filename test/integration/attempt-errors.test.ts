import { Writable } from 'node:stream';
import winston from 'winston';
import type { ApiProgram } from '../../apps/api/program.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { DeliveryLogRecorder, openPostgres, type Database } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { adminToken, call, startTestApi, token } from '../support/api.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { freePort, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

interface RecordView { outcome: string; httpStatus: number | null; error: string | null; responseBody: string | null; reason: string | null }
interface Detail { status: string; lastError: string | null; records: RecordView[] }

/** The real dispatcher, recorder, PostgreSQL and API, with the merchant's and the admin's reads. */
async function startLog(name: string, merchants: Merchant[], options: { allowPrivateTargets: boolean; logger?: winston.Logger }) {
  const harness = await startHarness({ name, merchants, retryDelaysMs: [100], deliveryLog: true, allowPrivateTargets: options.allowPrivateTargets, logger: options.logger, settings: { deliveryTimeoutMs: 1_000 } });
  const db = await createTestDatabase(name.replaceAll('-', '_'));
  const database = openPostgres(db.url);
  const recorder = new DeliveryLogRecorder(harness.broker, database, silentLogger(), { prefix: harness.prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
  await recorder.start();
  const api = await startTestApi(harness.prefix, merchants, {}, { DATABASE_URL: db.url, DELIVERY_LOG: 'on' });
  return { harness, db, database, recorder, api };
}

async function stopLog(log: Partial<Awaited<ReturnType<typeof startLog>>>) {
  await log.api?.stop();
  await log.recorder?.stop();
  await log.database?.close();
  await log.harness?.close();
  await log.db?.drop();
}

const merchantGet = async (api: ApiProgram, merchant: Merchant, path: string) =>
  call(api, path, { method: 'GET', headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` } });
const adminGet = async (api: ApiProgram, path: string) =>
  call(api, path, { method: 'GET', headers: { authorization: `Bearer ${await adminToken('webhooks:admin', 'ops')}` } });

/** Publishes one event for the merchant and waits until its webhook reads `failed` in the merchant's log. */
async function failedWebhook(log: Awaited<ReturnType<typeof startLog>>, merchant: Merchant) {
  const { messageId } = await log.harness.publisher.publish(sampleEvent('payout', merchant.id));
  return waitFor(`${merchant.id}'s webhook failed in the log`, async () => {
    const answer = await merchantGet(log.api, merchant, `/nucleus/webhooks/${messageId}`);
    const data = (answer.body as { data?: Detail }).data;
    return answer.status === 200 && data?.status === 'failed' && { webhookId: messageId, body: answer.body as { data: Detail } };
  }, 20_000);
}

/** A logger that keeps each line, as the dispatcher's operators read them. */
function recordingLogger(lines: Array<Record<string, unknown>>): winston.Logger {
  const sink = new Writable({ objectMode: true, write(info: Record<string, unknown>, _encoding, done) { lines.push(info); done(); } });
  return winston.createLogger({ level: 'info', transports: [new winston.transports.Stream({ stream: sink })] });
}

describe('what a merchant sees of an attempt to a blocked address', () => {
  // The merchant names a host that resolves to a loopback address: the scan the issue describes
  // ("blocked: vault.corp.internal resolves to 10.20.3.17"), with the one name that resolves here.
  const scanner = testMerchant('m_err_scan', 'http://placeholder');
  const lines: Array<Record<string, unknown>> = [];
  let receiver: Receiver;
  let log: Awaited<ReturnType<typeof startLog>>;

  beforeAll(async () => {
    receiver = await Receiver.start(() => 500);
    scanner.endpoints[0]!.url = `http://localhost:${new URL(receiver.url).port}/internal`;
    log = await startLog('err-blocked', [scanner], { allowPrivateTargets: false, logger: recordingLogger(lines) });
  });

  afterAll(async () => {
    await stopLog(log ?? {});
    await receiver?.close();
  });

  it('is blocked_address, with no address, no OS message and no answer body, on the merchant\'s and the admin\'s routes', async () => {
    const { webhookId, body } = await failedWebhook(log, scanner);
    expect(receiver.requests).toHaveLength(0);
    const attempted = body.data.records.filter((r) => r.error !== null || r.httpStatus !== null);
    expect(attempted).toEqual([expect.objectContaining({ outcome: 'failed', httpStatus: null, error: 'blocked_address', responseBody: null, reason: 'blocked' })]);
    expect(body.data.lastError).toBe('blocked_address');
    const list = await merchantGet(log.api, scanner, '/nucleus/webhooks');
    expect((list.body as { data: { webhooks: Array<{ lastError: string | null }> } }).data.webhooks).toEqual([expect.objectContaining({ lastError: 'blocked_address' })]);
    const admin = await adminGet(log.api, `/admin/merchants/${scanner.id}/webhooks/${webhookId}`);
    expect(admin.status).toBe(200);
    for (const text of [JSON.stringify(body), JSON.stringify(list.body), JSON.stringify(admin.body)]) {
      expect(text).not.toMatch(/127\.0\.0\.1|::1|localhost|resolves|ALLOW_PRIVATE_TARGETS/);
    }
  });

  it('keeps the detail where only operators read it: the dispatcher\'s log line and the failed entry\'s headers', async () => {
    const line = await waitFor('the dispatcher\'s "webhook failed" line', () => lines.find((l) => l.message === 'webhook failed' && l.merchantId === scanner.id), 10_000);
    // It names the endpoint: a webhook failing on two endpoints of a merchant logs two lines told apart.
    expect(line).toMatchObject({ endpointId: scanner.endpoints[0]!.id, webhookId: expect.any(String), errorClass: 'blocked_address', error: expect.stringMatching(/^blocked: localhost resolves to (127\.0\.0\.1|::1)/) });
    const entries = await log.harness.test.readStream(log.harness.names.failed, 1);
    const entry = entries.find((e) => e.properties.headers?.[HEADERS.merchantId] === scanner.id);
    expect(entry!.properties.headers![HEADERS.lastError]).toMatch(/^blocked: localhost resolves to/);
  });
});

describe('what a merchant sees of connection, DNS, TLS and timeout errors, and of an answer', () => {
  // Their URLs are set once the receiver listens.
  const [refused, tls, dns, slow, answering, odd] = ['refused', 'tls', 'dns', 'slow', '500', '999'].map((name) => testMerchant(`m_err_${name}`, 'http://placeholder')) as [Merchant, Merchant, Merchant, Merchant, Merchant, Merchant];
  let receiver: Receiver;
  let log: Awaited<ReturnType<typeof startLog>>;

  beforeAll(async () => {
    receiver = await Receiver.start((_n, req) => (req.path.startsWith('/slow') ? 'hang' : req.path.startsWith('/odd') ? 999 : 500));
    const port = new URL(receiver.url).port;
    refused.endpoints[0]!.url = `http://127.0.0.1:${await freePort()}/hooks`;
    dns.endpoints[0]!.url = 'http://no-such-host.invalid/hooks';
    tls.endpoints[0]!.url = `https://127.0.0.1:${port}/tls`; // TLS to a plain HTTP server
    slow.endpoints[0]!.url = `http://127.0.0.1:${port}/slow`;
    answering.endpoints[0]!.url = `http://127.0.0.1:${port}/answer`;
    odd.endpoints[0]!.url = `http://127.0.0.1:${port}/odd`;
    // Loopback targets allowed, as in a test; the guard is not what is tested here.
    log = await startLog('err-classes', [refused, tls, dns, slow, answering, odd], { allowPrivateTargets: true });
  });

  afterAll(async () => {
    await stopLog(log ?? {});
    await receiver?.close();
  });

  it.each([
    ['a refused connection', 'connection_refused', refused],
    ['a TLS handshake that fails', 'tls_error', tls],
    ['a host that does not resolve', 'dns_failure', dns],
    ['no answer within the delivery timeout', 'timeout', slow],
  ] as const)('%s reads %s, without an address, port or OS message, and no body', async (_name, errorClass, merchant) => {
    const { body } = await failedWebhook(log, merchant);
    const attempts = body.data.records.filter((r) => r.outcome === 'retrying' || r.outcome === 'failed');
    expect(attempts.map((r) => [r.error, r.httpStatus, r.responseBody])).toEqual([
      [errorClass, null, null],
      [errorClass, null, null],
    ]);
    expect(body.data.lastError).toBe(errorClass);
    expect(JSON.stringify(body)).not.toMatch(/127\.0\.0\.1|no-such-host|E[A-Z]{4,}|ms\b|SSL|getaddrinfo|connect /);
  });

  it('a non-2xx answer reads http_<status>, and the first bytes of the merchant\'s own answer stay', async () => {
    const { body } = await failedWebhook(log, answering);
    const attempts = body.data.records.filter((r) => r.outcome === 'retrying' || r.outcome === 'failed');
    expect(attempts.map((r) => [r.error, r.httpStatus, r.responseBody])).toEqual([
      ['http_500', 500, 'ok'],
      ['http_500', 500, 'ok'],
    ]);
  });

  it('a status outside HTTP\'s 100-599 is no answer: network_error, and the webhook is in the log as any other', async () => {
    // undici passes 600-999 on; as http_999 the recorder refused every record, and the webhook was in no log.
    const { body } = await failedWebhook(log, odd);
    const attempts = body.data.records.filter((r) => r.outcome === 'retrying' || r.outcome === 'failed');
    expect(attempts.map((r) => [r.error, r.httpStatus, r.responseBody])).toEqual([
      ['network_error', null, null],
      ['network_error', null, null],
    ]);
  });
});
