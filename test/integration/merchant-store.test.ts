import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { ApiProgram } from '../../apps/api/program.js';
import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import pg from 'pg';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { type Logger, silentLogger } from '../../libs/logger/index.js';
import { MerchantStoreUnavailableError, PgMerchantDirectory, SecretBox, SecretsKeyError } from '../../libs/merchants/index.js';
import { adminToken, type Answer, call, startTestApi, token, waitReady } from '../support/api.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { startDatabaseDispatcher, TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { freePort } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { firstEndpointPath, patchFirstEndpoint, putMerchantWithEndpoint } from '../support/merchant-endpoints.js';

const run = promisify(execFile);
const KEY = Buffer.from(TEST_SECRETS_KEY, 'base64');

/** Issue 44: merchants and their secrets are rows in PostgreSQL, cached in every program and kept current by NOTIFY and a poll. */
describe('merchants in PostgreSQL', () => {
  const prefix = uniquePrefix('merchant-store');
  let db: TestDatabase;
  let apiA: ApiProgram;
  let apiB: ApiProgram;
  let dispatcher: DispatcherProgram;
  let auth: Record<string, string>;
  const open: Array<{ close(): Promise<void> }> = [];
  let env: Record<string, string | undefined>;

  beforeAll(async () => {
    db = await createTestDatabase('merchant_store');
    env = { DATABASE_URL: db.url, SECRETS_KEY: TEST_SECRETS_KEY, ALLOW_PRIVATE_TARGETS: 'true', WEBHOOKS_DEV: 'true' };
    // Four resends at once per merchant, refilled at one a minute: what both replicas together allow.
    const limits = { rateLimit: { perMinute: 1, burst: 4 } };
    apiA = await waitReady(await startTestApi(prefix, [], limits, env));
    apiB = await waitReady(await startTestApi(prefix, [], limits, env));
    dispatcher = await startDatabaseDispatcher(prefix, db.url);
    auth = { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' };
  });

  afterAll(async () => {
    for (const each of open.reverse()) await each.close();
    await dispatcher?.stop();
    await apiA?.stop();
    await apiB?.stop();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await db?.drop();
  });

  const send = (api: ApiProgram, method: string, id: string, body?: unknown, headers: Record<string, string> = {}) =>
    call(api, `/admin/merchants/${id}`, { method, headers: { ...auth, ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
  const withEndpoint = (api: ApiProgram, id: string, body: { publicKey: string; url: string; events?: string[] }) => putMerchantWithEndpoint(api, id, body, auth);
  const code = (answer: Answer) => [answer.status, (answer.body as { error: { code: string } | null }).error?.code ?? null];
  const row = async (id: string) => (await db.query<{ version: string; xmin: string; secrets: string }>('SELECT version, xmin::text, secrets FROM merchants WHERE id = $1', [id]))[0]!;

  /** A directory of the test's own, as another program holds it. */
  async function directory(options: { pollIntervalMs?: number; keys?: Buffer[]; logger?: Logger } = {}): Promise<PgMerchantDirectory> {
    const database = openPostgres(db.url);
    const [key, ...previous] = options.keys ?? [KEY];
    const dir = new PgMerchantDirectory(database, new SecretBox(key!, previous), options.logger ?? silentLogger(), { pollIntervalMs: options.pollIntervalMs });
    open.push({ close: () => database.close() }, dir);
    await dir.start();
    return dir;
  }

  it('shows a change made through one API replica to a dispatcher and to the other replica within a second', async () => {
    const created = await withEndpoint(apiA, 'm_fast', { publicKey: 'pk_fast_000001', url: 'https://hooks.example.com/one' });
    expect(created.status).toBe(201);
    await waitFor('dispatcher has it', () => dispatcher.merchants.byId('m_fast')?.endpoints.length === 1, 1_000);
    const changedAt = Date.now();
    expect((await patchFirstEndpoint(apiA, 'm_fast', { url: 'https://hooks.example.com/two' }, auth)).status).toBe(200);
    await waitFor('dispatcher sees the new URL', () => dispatcher.merchants.byId('m_fast')?.endpoints[0]?.url === 'https://hooks.example.com/two', 1_000, 5);
    await waitFor('replica B answers with it', async () => ((await send(apiB, 'GET', 'm_fast')).body as any).data?.endpoints?.[0]?.url === 'https://hooks.example.com/two', 1_000 - (Date.now() - changedAt), 5);
    // The other replica authenticates the merchant by its key at once, too.
    const resend = await call(apiB, '/nucleus/tnx/webhook?reference=nothing', { headers: { 'x-auth-token': 'pk_fast_000001', authorization: `Bearer ${await token('m_fast')}` } });
    expect(resend.status).toBe(404);
  });

  it('finds a change whose notification was lost with the poll, even one committed by a transaction older than the last poll', async () => {
    const polling = await directory({ pollIntervalMs: 300 });
    const deaf = await directory({ pollIntervalMs: 3_600_000 });
    await withEndpoint(apiA, 'm_quiet', { publicKey: 'pk_quiet_00001', url: 'https://hooks.example.com/q' });
    await waitFor('both have it', () => polling.byId('m_quiet')?.endpoints.length === 1 && deaf.byId('m_quiet')?.endpoints.length === 1, 5_000);

    // A write that never notifies (a notification lost with its connection), by a transaction that
    // holds its id across several polls before it commits.
    const writer = new pg.Client({ connectionString: db.url });
    await writer.connect();
    try {
      await writer.query('BEGIN');
      await writer.query(`UPDATE merchants SET endpoints = jsonb_set(endpoints, '{0,url}', '"https://hooks.example.com/late"'), version = version + 1, change_xid = pg_current_xact_id() WHERE id = 'm_quiet'`);
      const pollsBefore = Date.now();
      await waitFor('a few polls ran', () => Date.now() - pollsBefore > 1_000, 2_000, 100);
      await writer.query('COMMIT');
    } finally {
      await writer.end();
    }
    await waitFor('the polling directory found it', () => polling.byId('m_quiet')?.endpoints[0]?.url === 'https://hooks.example.com/late', 3_000);
    expect(deaf.byId('m_quiet')?.endpoints[0]?.url).toBe('https://hooks.example.com/q');
  });

  it('writes nothing for 500 PATCHes that change nothing: the row keeps its version and its tuple', async () => {
    await withEndpoint(apiA, 'm_same', { publicKey: 'pk_same_000001', url: 'https://hooks.example.com/same', events: ['payout'] });
    const before = await row('m_same');
    const endpoint = await firstEndpointPath(apiA, 'm_same', auth);
    const body = { url: 'https://hooks.example.com/same', enabled: true, events: ['payout'] };
    const statuses = new Map<number, number>();
    // 500 (it was 10,000, then 2,000): one write would show in the tuple (xmin); 20 at a time on two
    // replicas is for a write only some races make, and 25 rounds of them take seconds, not minutes.
    for (let batch = 0; batch < 25; batch++) {
      const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => call(i % 2 ? apiA : apiB, endpoint, { method: 'PATCH', headers: auth, body: JSON.stringify(body) })));
      for (const answer of answers) statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
    }
    expect(Object.fromEntries(statuses)).toEqual({ 200: 500 });
    const after = await row('m_same');
    expect(after).toEqual(before);
  }, 120_000);

  it('offers compare-and-set to the dashboard: ETag on GET and writes, If-Match refused with 412 once stale', async () => {
    const created = await send(apiA, 'PUT', 'm_cas', { publicKey: 'pk_cas_0000001' }, { 'if-match': '"0"' });
    expect(created.status).toBe(201);
    expect(created.headers.get('etag')).toBe('"1"');
    expect(code(await send(apiA, 'PUT', 'm_cas', { publicKey: 'pk_cas_0000001' }, { 'if-match': '"0"' }))).toEqual([412, 'precondition_failed']);
    // Replica B serves what it has heard of (the create's notification), a moment after A's answer.
    const read = await waitFor('replica B has it', async () => {
      const answer = await send(apiB, 'GET', 'm_cas');
      return answer.status === 200 && answer;
    }, 5_000);
    expect(read.headers.get('etag')).toBe('"1"');
    const first = await send(apiA, 'PATCH', 'm_cas', { publicKey: 'pk_cas_0000002' }, { 'if-match': '"1"' });
    expect(first.status).toBe(200);
    expect(first.headers.get('etag')).toBe('"2"');
    // A second dashboard tab still holding version 1 does not overwrite what the first wrote.
    expect(code(await send(apiB, 'PATCH', 'm_cas', { publicKey: 'pk_cas_0000003' }, { 'if-match': '"1"' }))).toEqual([412, 'precondition_failed']);
    const garbage = await send(apiB, 'PATCH', 'm_cas', { publicKey: 'pk_cas_0000003' }, { 'if-match': 'garbage' });
    expect(code(garbage)).toEqual([412, 'precondition_failed']);
    // Compared strongly (RFC 9110): neither a weak tag of the version nor another spelling of it holds.
    for (const tag of ['W/"2"', '"02"']) expect(code(await send(apiB, 'PATCH', 'm_cas', { publicKey: 'pk_cas_0000003' }, { 'if-match': tag }))).toEqual([412, 'precondition_failed']);
    // A refusal carries no ETag: one it carried would be taken for the merchant's version.
    expect(garbage.headers.get('etag')).toBeNull();
    // No merchant has no version: If-Match cannot hold (RFC 9110).
    expect(code(await send(apiB, 'PATCH', 'm_nobody', { publicKey: 'pk_cas_0000003' }, { 'if-match': '"1"' }))).toEqual([412, 'precondition_failed']);
    expect(((await send(apiA, 'GET', 'm_cas')).body as any).data.publicKey).toBe('pk_cas_0000002');
    expect((await row('m_cas')).version).toBe('2');

    // A repeat of an Idempotency-Key answers the first answer's ETag with its body: after another write (an ETag
    // newer than the body would let the next If-Match overwrite a change the dashboard never saw), and on the
    // replica that wrote as on the other.
    const keyed = await send(apiA, 'PATCH', 'm_cas', { publicKey: 'pk_cas_0000004' }, { 'idempotency-key': 'cas-keyed' });
    expect(keyed.headers.get('etag')).toBe('"3"');
    expect((await send(apiA, 'PATCH', 'm_cas', { publicKey: 'pk_cas_0000005' })).headers.get('etag')).toBe('"4"');
    await waitFor('replica B at version 4', async () => (await send(apiB, 'GET', 'm_cas')).headers.get('etag') === '"4"', 15_000);
    for (const api of [apiA, apiB]) {
      const repeat = await send(api, 'PATCH', 'm_cas', { publicKey: 'pk_cas_0000004' }, { 'idempotency-key': 'cas-keyed' });
      expect([repeat.headers.get('idempotent-replayed'), repeat.headers.get('etag'), (repeat.body as any).data.publicKey]).toEqual(['true', '"3"', 'pk_cas_0000004']);
    }

    // If-Match: * (RFC 9110): a merchant that exists, at any version; none for one that does not.
    expect((await send(apiB, 'PATCH', 'm_cas', { publicKey: 'pk_cas_0000006' }, { 'if-match': '*' })).headers.get('etag')).toBe('"5"');
    expect(code(await send(apiB, 'PUT', 'm_cas_none', { publicKey: 'pk_cas_0000007' }, { 'if-match': '*' }))).toEqual([412, 'precondition_failed']);
    expect((await send(apiB, 'GET', 'm_cas_none')).status).toBe(404);
  });

  it('lets two API replicas together allow what one allows of a merchant\'s resends', async () => {
    await withEndpoint(apiA, 'm_limit', { publicKey: 'pk_limit_00001', url: 'https://hooks.example.com/l' });
    await waitFor('both replicas have it', async () => (await send(apiB, 'GET', 'm_limit')).status === 200, 5_000);
    const headers = { 'x-auth-token': 'pk_limit_00001', authorization: `Bearer ${await token('m_limit')}` };
    const answers = [];
    for (let i = 0; i < 8; i++) answers.push(await call(i % 2 ? apiB : apiA, '/nucleus/tnx/webhook?reference=none', { headers }));
    expect(answers.map((a) => a.status)).toEqual([404, 404, 404, 404, 429, 429, 429, 429]);
    expect(Number(answers[7]!.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('keeps no secret in clear in a dump of the database, Idempotency-Key answers included', async () => {
    expect((await send(apiA, 'PUT', 'm_dump', { publicKey: 'pk_dump_000001' })).status).toBe(201);
    const created = await call(apiA, '/admin/merchants/m_dump/endpoints', { method: 'POST', headers: { ...auth, 'idempotency-key': 'dump-1' }, body: JSON.stringify({ url: 'https://hooks.example.com/d' }) });
    const secret = (created.body as any).data.secret as string;
    const rotated = await call(apiA, `/admin/merchants/m_dump/endpoints/${(created.body as any).data.id}/secret/rotate`, { method: 'POST', headers: { ...auth, 'idempotency-key': 'dump-2' }, body: '{}' });
    expect(rotated.status).toBe(200);
    const { stdout } = await run('pg_dump', ['--data-only', db.url], { maxBuffer: 256 * 1024 * 1024 });
    expect(stdout).toContain('COPY public.merchants');
    expect(stdout).toContain('pk_dump_000001');
    expect(stdout).not.toContain('whsec_');
    expect(stdout).not.toContain(secret.slice(6));
    expect(stdout).not.toContain((rotated.body as any).data.secret.slice(6));
    // The dispatcher holds it in the clear, as it must to sign.
    await waitFor('dispatcher has the new secret', () => dispatcher.merchants.byId('m_dump')?.endpoints[0]?.secret === (rotated.body as any).data.secret, 5_000);
  });

  it('keeps a rotated-out secret only until the merchant\'s first write after its grace ended (production.md)', async () => {
    const created = await withEndpoint(apiA, 'm_grace', { publicKey: 'pk_grace_000001', url: 'https://hooks.example.com/g' });
    const first = (created.body as any).data;
    const path = `/admin/merchants/m_grace/endpoints/${first.id}`;
    const rotated = await call(apiA, `${path}/secret/rotate`, { method: 'POST', headers: auth, body: JSON.stringify({ graceSeconds: 1 }) });
    expect(rotated.status).toBe(200);
    const endsAt = Date.parse((rotated.body as any).data.previousSecretExpiresAt);
    const sealed = async () => new SecretBox(KEY).open((await row('m_grace')).secrets, 'm_grace');
    expect(await sealed()).toContain(first.secret.slice(6));
    await waitFor('the grace to end', () => Date.now() > endsAt + 50, 5_000);
    // A write that is not a rotation: the secret whose grace ended goes with it.
    expect((await call(apiA, path, { method: 'PATCH', headers: auth, body: JSON.stringify({ description: 'after the grace' }) })).status).toBe(200);
    expect(await sealed()).toContain((rotated.body as any).data.secret.slice(6));
    expect(await sealed()).not.toContain(first.secret.slice(6));
  });

  it('rotates SECRETS_KEY: the previous key still opens, reseal seals everything anew, and a wrong key stops start-up naming the variable', async () => {
    const newKey = Buffer.alloc(32, 9);
    const cli = (keys: Record<string, string>) => runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: db.url, ...keys }, ['merchants', 'reseal']);
    const both = await directory({ keys: [newKey, KEY] });
    expect(both.byId('m_dump')?.endpoints[0]?.secret).toBe(dispatcher.merchants.byId('m_dump')?.endpoints[0]?.secret);
    await expect(directory({ keys: [newKey] })).rejects.toThrow(SecretsKeyError);
    await expect(directory({ keys: [newKey] })).rejects.toThrow(/SECRETS_KEY or SECRETS_KEY_PREVIOUS .*: the webhook secrets of merchant m_\w+ \(endpoint ep_/);

    const resealed = await cli({ SECRETS_KEY: newKey.toString('base64'), SECRETS_KEY_PREVIOUS: TEST_SECRETS_KEY });
    expect(resealed.code).toBe(0);
    expect(resealed.stderr).toMatch(/^[1-9]\d* stored secret\(s\) sealed again/);
    const alone = await directory({ keys: [newKey] });
    for (const id of ['m_fast', 'm_dump', 'm_same']) expect(alone.byId(id)?.endpoints[0]?.secret).toBe(dispatcher.merchants.byId(id)?.endpoints[0]?.secret);
    expect((await cli({ SECRETS_KEY: newKey.toString('base64') })).stderr).toMatch(/^0 stored secret/);
    // Back to the tests' key, for the programs still running on it.
    expect((await cli({ SECRETS_KEY: TEST_SECRETS_KEY, SECRETS_KEY_PREVIOUS: newKey.toString('base64') })).code).toBe(0);
  });

  it('waits for a database that cannot be reached at start-up, saying so, and gives up only when it stays away', async () => {
    const warnings: string[] = [];
    const logger = silentLogger();
    logger.warn = ((message: string) => {
      warnings.push(message);
      return logger;
    }) as Logger['warn'];
    const database = openPostgres(`postgres://postgres@127.0.0.1:${await freePort()}/postgres`, { connectTimeoutMs: 200 });
    const started = Date.now();
    const dir = new PgMerchantDirectory(database, new SecretBox(KEY), logger, { startStallMs: 1_500 });
    await expect(dir.start()).rejects.toThrow(MerchantStoreUnavailableError);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_500);
    expect(warnings).toEqual(['merchant database unreachable at start-up; waiting for it']);
    await dir.close();
    await database.close();
  });
});
