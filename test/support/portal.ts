import type { ApiOptions, ApiProgram } from '../../apps/api/program.js';
import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { type RecorderProgram, startRecorder } from '../../apps/recorder/program.js';
import { silentLogger } from '../../libs/logger/index.js';
import { adminToken, type Answer, call, startTestApi, waitReady } from './api.js';
import { brokerUrl, TestBroker, uniquePrefix } from './broker.js';
import { startDatabaseDispatcher, TEST_SECRETS_KEY } from './dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';
import { waitFor } from './wait.js';
import { putMerchantWithEndpoint } from './merchant-endpoints.js';

/**
 * The whole service for the portal's tests, as deployed: API replicas with merchants and the
 * delivery log in PostgreSQL, a dispatcher (one attempt, then failed), a recorder.
 */
export interface PortalStack {
  prefix: string;
  db: TestDatabase;
  apis: ApiProgram[];
  dispatcher: DispatcherProgram;
  recorder: RecorderProgram;
  admin(api: ApiProgram, method: string, path: string, body?: unknown): Promise<Answer>;
  /** A merchant whose webhook points at `url`; returns its first secret. */
  putMerchant(id: string, url: string): Promise<string>;
  /** The portal API's path of the merchant's endpoint (its first, or `index`), as the dispatcher holds it. */
  endpoint(merchantId: string, index?: number): string;
  /** A single-use link to the portal, minted through the admin API; with every permission unless `body` says otherwise. */
  link(merchantId: string, body?: unknown, api?: ApiProgram): Promise<string>;
  /** Waits until the log shows the webhook in this status. */
  logged(merchantId: string, webhookId: string, status: string, timeoutMs?: number): Promise<void>;
  /** A browser's session opened from a fresh link (asserting it opens): its cookie and CSRF token. */
  open(merchantId: string, body?: unknown, api?: ApiProgram): Promise<PortalBrowser>;
  /** A portal write as the page makes it: the session's cookie and its CSRF token (null: none sent). */
  write(b: PortalBrowser, method: string, path: string, body?: unknown, csrf?: string | null, api?: ApiProgram): Promise<Answer>;
  /** The environment the API replicas run with, for a test that starts one more. */
  env: Record<string, string | undefined>;
  close(): Promise<void>;
}

export interface PortalBrowser {
  cookie: string;
  csrf: string;
}

/** The link's token, as the page reads it from the fragment. */
export const tokenOf = (url: string): string => /#token=([A-Za-z0-9_.-]+)$/.exec(url)![1]!;

/** The page's exchange of a link's token for a session. */
export const redeemLink = (api: ApiProgram, url: string): Promise<Answer> =>
  call(api, '/portal/api/session', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: tokenOf(url) }) });

/** A single-use link to the portal, minted through the admin API; with every permission unless `body` says otherwise. */
export async function mintLink(api: ApiProgram, merchantId: string, body?: unknown): Promise<string> {
  const answer = await call(api, `/admin/merchants/${merchantId}/portal-sessions`, {
    headers: { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' },
    body: JSON.stringify(body ?? { permissions: ['resend', 'manage-endpoint', 'manage-secret'] }),
  });
  if (answer.status !== 201) throw new Error(`portal link: ${answer.status} ${JSON.stringify(answer.body)}`);
  return (answer.body as { data: { url: string } }).data.url;
}

/** A browser's session opened from a fresh link (asserting it opens): its cookie and CSRF token. */
export async function openSession(api: ApiProgram, merchantId: string, body?: unknown): Promise<PortalBrowser> {
  const answer = await redeemLink(api, await mintLink(api, merchantId, body));
  if (answer.status !== 201) throw new Error(`portal session: ${answer.status} ${JSON.stringify(answer.body)}`);
  const cookie = answer.headers.get('set-cookie')!.split(';')[0]!;
  return { cookie, csrf: (answer.body as { data: { csrfToken: string } }).data.csrfToken };
}

/** `dispatcherEnv` overrides the dispatcher's settings (its schedule, concurrency, timeout). */
export async function startPortalStack(name: string, replicas = 1, options: ApiOptions = {}, dispatcherEnv: Record<string, string> = {}): Promise<PortalStack> {
  const prefix = uniquePrefix(name);
  const db = await createTestDatabase(name.replace(/-/g, '_'));
  const env = {
    WEBHOOKS_DEV: 'true',
    SECRETS_KEY: TEST_SECRETS_KEY,
    ALLOW_PRIVATE_TARGETS: 'true',
    DATABASE_URL: db.url,
    DELIVERY_LOG: 'on',
  };
  const apis: ApiProgram[] = [];
  let dispatcher: DispatcherProgram | undefined;
  let recorder: RecorderProgram | undefined;
  const close = async () => {
    await dispatcher?.stop();
    for (const api of apis) await api.stop();
    await recorder?.stop();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await db.drop();
  };
  try {
    recorder = await startRecorder(loadRecorderConfig({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: db.url }), silentLogger());
    for (let i = 0; i < replicas; i++) apis.push(await startTestApi(prefix, [], options, env));
    dispatcher = await startDatabaseDispatcher(prefix, db.url, { DELIVERY_TIMEOUT_MS: '2000', ...dispatcherEnv });
    for (const api of apis) await waitReady(api);
  } catch (err) {
    await close();
    throw err;
  }
  const adminAuth = `Bearer ${await adminToken()}`;
  const admin = (api: ApiProgram, method: string, path: string, body?: unknown) =>
    call(api, path, { method, headers: { authorization: adminAuth, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const d = dispatcher;
  return {
    prefix,
    env,
    db,
    apis,
    dispatcher: d,
    recorder: recorder!,
    admin,
    async putMerchant(id, url) {
      const answer = await putMerchantWithEndpoint(apis[0]!, id, { publicKey: `pk_test_${id}_000000`, url }, { authorization: adminAuth });
      if (answer.status !== 201) throw new Error(`PUT ${id} and its endpoint: ${answer.status} ${JSON.stringify(answer.body)}`);
      await waitFor(`${id} known to the dispatcher`, () => (d.merchants.byId(id)?.endpoints.length ?? 0) > 0, 10_000);
      for (const api of apis) await waitFor(`${id} known to every replica`, async () => ((await admin(api, 'GET', `/admin/merchants/${id}`)).body as { data?: { endpoints?: unknown[] } }).data?.endpoints?.length === 1, 10_000);
      return (answer.body as { data: { secret: string } }).data.secret;
    },
    link: (merchantId, body, api = apis[0]!) => mintLink(api, merchantId, body),
    endpoint(merchantId, index = 0) {
      const found = d.merchants.byId(merchantId)?.endpoints[index];
      if (!found) throw new Error(`${merchantId} has no endpoint ${index} (yet)`);
      return `/portal/api/endpoints/${found.id}`;
    },
    open: (merchantId, body, api = apis[0]!) => openSession(api, merchantId, body),
    write(b, method, path, body, csrf = b.csrf, api = apis[0]!) {
      return call(api, path, {
        method,
        headers: { cookie: b.cookie, 'content-type': 'application/json', ...(csrf === null ? {} : { 'x-csrf-token': csrf }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    },
    async logged(merchantId, webhookId, status, timeoutMs = 15_000) {
      await waitFor(
        `${webhookId} ${status} in the log`,
        async () => (await db.query<{ status: string }>('SELECT status FROM delivery_webhooks WHERE merchant_id = $1 AND webhook_id = $2', [merchantId, webhookId]))[0]?.status === status,
        timeoutMs,
        50,
      );
    },
    close,
  };
}
