import { type Database, openPostgres, type Queryable } from '../../libs/delivery-store/index.js';
import { type Logger, silentLogger } from '../../libs/logger/index.js';
import { deleteMerchantData, EndpointLimitError, type EndpointInput, EndpointSettings, MerchantSettings, PgMerchantDirectory, SecretBox, VersionMismatchError } from '../../libs/merchants/index.js';
import { DEFAULT_POLL_INTERVAL_MS } from '../../libs/merchants/pg-directory.js';
import { adminToken, call, startTestApi, waitReady } from '../support/api.js';
import { TestBroker, uniquePrefix } from '../support/broker.js';
import { capturingLogger } from '../support/capturing-logger.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';
import { patchFirst, putWithEndpoint, rotateFirst } from '../support/merchant-endpoints.js';

const KEY = Buffer.from(TEST_SECRETS_KEY, 'base64');
const NEW_KEY = Buffer.alloc(32, 7);

/**
 * Issue 53: what every running program holds of the merchant directory never goes back and never
 * keeps what the database no longer has: a merchant deleted and made again, a delete whose
 * notification was lost, a clock write that must not touch the merchant, a row sealed with a key
 * a program lacks. Each program here is a PgMerchantDirectory on a pool of its own, with the
 * default poll unless the test says otherwise.
 */
describe('the merchant directory of a running program', () => {
  let db: TestDatabase;
  let database: Database;
  let directory: PgMerchantDirectory;
  let settings: MerchantSettings;
  const open: Array<{ close(): Promise<void> }> = [];

  beforeAll(async () => {
    db = await createTestDatabase('merchant_directory');
    database = openPostgres(db.url);
    directory = new PgMerchantDirectory(database, new SecretBox(KEY), silentLogger());
    await directory.start();
    settings = new MerchantSettings(directory, { allowHttp: false, allowPrivateTargets: false });
  });

  afterAll(async () => {
    for (const each of open.reverse()) await each.close();
    await directory?.close();
    await database?.close();
    await db?.drop();
  });

  /** Counts what `box` opens from now on. */
  const countOpens = (box: SecretBox) => {
    const counted = { calls: 0 };
    const open = box.open.bind(box);
    box.open = (sealed, boundTo) => {
      counted.calls++;
      return open(sealed, boundTo);
    };
    return counted;
  };

  /** Another program's directory. */
  async function program(options: { keys?: Buffer[]; logger?: Logger; openSecrets?: boolean; pollIntervalMs?: number } = {}): Promise<{ dir: PgMerchantDirectory; box: SecretBox; opens: { calls: number } }> {
    const pool = openPostgres(db.url, { applicationName: 'merchant-directory-test' });
    const [key, ...previous] = options.keys ?? [KEY];
    const box = new SecretBox(key!, previous);
    // Counted from the start: what the load opens too.
    const opens = countOpens(box);
    const dir = new PgMerchantDirectory(pool, box, options.logger ?? silentLogger(), { openSecrets: options.openSecrets, pollIntervalMs: options.pollIntervalMs });
    open.push({ close: () => pool.close() }, dir);
    await dir.start();
    return { dir, box, opens };
  }

  /** The merchant, then its endpoint: two writes, two versions. */
  const put = (id: string, url: string, by = settings) => putWithEndpoint(by, id, { publicKey: `pk_${id}_000000`, url });
  const urlIn = (dir: PgMerchantDirectory, id: string) => dir.byId(id)?.endpoints[0]?.url;

  /** The database with every NOTIFY swallowed: a notification lost (a reconnect, a half-open socket, a pooler in transaction mode). */
  const deaf = (inner: Database) => ({
    transaction: <T>(work: (tx: Queryable) => Promise<T>) =>
      inner.transaction((tx) => work({ query: (text, params) => (text.includes('pg_notify') ? Promise.resolve({ rows: [] }) : tx.query(text, params)) as never })),
  });

  it('listens once and polls on one timer when started twice; stays closed once closed', async () => {
    const pool = openPostgres(db.url, { applicationName: 'merchant-directory-test' });
    let listens = 0;
    const listen = pool.listen.bind(pool);
    pool.listen = (channel, onPayload) => (listens++, listen(channel, onPayload));
    const dir = new PgMerchantDirectory(pool, new SecretBox(KEY), silentLogger());
    try {
      await Promise.all([dir.start(), dir.start()]);
      await dir.start();
      // A second LISTEN connection and interval, of which close() ended only the last.
      expect(listens).toBe(1);
      await Promise.all([dir.close(), dir.close()]);
      await dir.start();
      expect(listens).toBe(1);
    } finally {
      await dir.close();
      await pool.close();
    }
  });

  it('serves a merchant deleted and made again with the same id at its new settings, its version going on from the old one', async () => {
    await put('m_again', 'https://one.example.com/');
    await patchFirst(settings, 'm_again', { url: 'https://two.example.com/' });
    await patchFirst(settings, 'm_again', { url: 'https://three.example.com/' });
    const { dir: running } = await program();
    expect([urlIn(running, 'm_again'), running.versionOf('m_again')]).toEqual(['https://three.example.com/', 4]);

    await deleteMerchantData(database, 'm_again', { actor: 'test' });
    const again = await put('m_again', 'https://four.example.com/');
    // No version is given twice to one id: a dashboard's ETag from before the delete is stale.
    expect(again.version).toBe(6);
    await waitFor('the running program to serve the new settings', () => urlIn(running, 'm_again') === 'https://four.example.com/', 30_000);
    expect(running.versionOf('m_again')).toBe(6);
    expect(running.byPublicKey('pk_m_again_000000')?.endpoints[0]?.url).toBe('https://four.example.com/');
  });

  it('forgets a merchant whose delete notified no one, by the poll, within 30 s', async () => {
    // The poll's default interval bounds it; the test polls every 500 ms rather than wait 10 s for it.
    expect(DEFAULT_POLL_INTERVAL_MS).toBeLessThanOrEqual(10_000);
    await put('m_unheard', 'https://unheard.example.com/');
    const { dir: running } = await program({ pollIntervalMs: 500 });
    expect(urlIn(running, 'm_unheard')).toBe('https://unheard.example.com/');
    const deletedAt = Date.now();
    await deleteMerchantData(deaf(database), 'm_unheard', { actor: 'test' });
    await waitFor('the running program to forget it', () => running.byId('m_unheard') === undefined, 30_000, 100);
    expect(Date.now() - deletedAt).toBeLessThan(30_000);
    expect(running.byPublicKey('pk_m_unheard_000000')).toBeUndefined();
  });

  it('takes the row a refused or replayed write read: after a 412 or a limit, the program that refused shows what refused it, its notification lost', async () => {
    await put('m_refused', 'https://one.example.com/');
    // No poll within the test: what the program shows comes from its own writes alone.
    const { dir: running } = await program({ pollIntervalMs: 3_600_000 });
    const mine = new MerchantSettings(running, { allowHttp: false, allowPrivateTargets: false }, undefined, undefined, 1);
    expect(running.versionOf('m_refused')).toBe(2);
    // Another program's change whose NOTIFY never came.
    const quietly = (url: string) => database.query(`UPDATE merchants SET endpoints = jsonb_set(endpoints, '{0,url}', to_jsonb($1::text)), version = version + 1, change_xid = pg_current_xact_id() WHERE id = 'm_refused'`, [url]);

    await quietly('https://two.example.com/');
    // A dashboard's If-Match from before: refused, and the GET it makes next answers the version it must send.
    await expect(mine.patch('m_refused', { publicKey: 'pk_m_refused_000001' }, { ifVersion: 2 })).rejects.toThrow(VersionMismatchError);
    expect([running.versionOf('m_refused'), urlIn(running, 'm_refused')]).toEqual([3, 'https://two.example.com/']);

    await quietly('https://three.example.com/');
    // Refused for the limit: the program lists the endpoint that fills it as it is now.
    await expect(new EndpointSettings(mine).create('m_refused', { url: 'https://four.example.com/', enabled: true } as EndpointInput)).rejects.toThrow(EndpointLimitError);
    expect([running.versionOf('m_refused'), urlIn(running, 'm_refused')]).toEqual([4, 'https://three.example.com/']);

    // A repeat of an Idempotency-Key answers the first answer's version, and the program holds the row as it is now.
    expect((await mine.patch('m_refused', { publicKey: 'pk_m_refused_000002' }, { idempotencyKey: 'refused-key' })).version).toBe(5);
    await quietly('https://five.example.com/');
    expect(await mine.patch('m_refused', { publicKey: 'pk_m_refused_000002' }, { idempotencyKey: 'refused-key' })).toMatchObject({ replayed: true, version: 5 });
    expect([running.versionOf('m_refused'), urlIn(running, 'm_refused')]).toEqual([6, 'https://five.example.com/']);
  });

  it('keeps the failing clock outside the merchant: its writes change no version and open no secret anywhere', async () => {
    await put('m_clock', 'https://clock.example.com/');
    const { dir: running, box } = await program();
    const opens = countOpens(box);
    const version = directory.versionOf('m_clock');
    const url = 'https://clock.example.com/';
    // A dispatcher's minute of failures starts it, by PostgreSQL's clock.
    const started = await directory.recordHealth('m_clock', url, { kind: 'failing', streakMs: 60_000, afterMs: 300_000 });
    expect(started?.wrote).toBe(true);
    const since = started!.clock!.failingSince;
    expect(Date.parse(since)).toBe(started!.now.getTime() - 60_000);
    // Another dispatcher's failures refresh it: none starts over it.
    const refreshed = await directory.recordHealth('m_clock', url, { kind: 'failing', streakMs: 120_000, afterMs: 300_000 });
    expect(refreshed?.clock?.failingSince).toBe(since);
    await waitFor('the running program to see the clock', () => running.byId('m_clock')?.endpoints[0]?.failingSince === since, 30_000);
    await waitFor('the running program to see its refresh', () => running.byId('m_clock')?.endpoints[0]?.lastFailureAt === refreshed!.clock!.lastFailureAt, 30_000);
    expect([directory.versionOf('m_clock'), running.versionOf('m_clock')]).toEqual([version, version]);
    expect((await db.query<{ version: string }>('SELECT version FROM merchants WHERE id = $1', ['m_clock']))[0]!.version).toBe(String(version));
    expect(opens.calls).toBe(0);
    expect(settings.get('m_clock')?.endpoints[0]?.failingSince).toBe(since);

    // Turned off by hand, the clock starts over: cleared in the table, and so in every program.
    await patchFirst(settings, 'm_clock', { enabled: false });
    await waitFor('the running program to see it cleared', () => running.byId('m_clock')?.endpoints[0]?.enabled === false && running.byId('m_clock')?.endpoints[0]?.failingSince === undefined, 30_000);
    expect((await db.query('SELECT failing_since FROM endpoint_health WHERE merchant_id = $1', ['m_clock']))[0]).toEqual({ failing_since: null });
  });

  it('ends the failing clock on a success after its start though another dispatcher refreshed it since, and not one that started after the success', async () => {
    await put('m_flap', 'https://flap.example.com/');
    const url = 'https://flap.example.com/';
    const failing = { kind: 'failing' as const, streakMs: 60_000, afterMs: 300_000 };
    const since = (await directory.recordHealth('m_flap', url, failing))!.clock!.failingSince;
    // Dispatcher B refreshes the clock's last failure; dispatcher A then sees a success.
    expect((await directory.recordHealth('m_flap', url, { ...failing, streakMs: 1_000 }))?.clock?.failingSince).toBe(since);
    expect(await directory.recordHealth('m_flap', url, { kind: 'succeeded', agoMs: 0 })).toMatchObject({ wrote: true, clock: undefined });
    expect((await db.query('SELECT failing_since FROM endpoint_health WHERE merchant_id = $1', ['m_flap']))[0]).toEqual({ failing_since: null });
    // A clock started a minute ago (by PostgreSQL) is not a success of two minutes ago's to end.
    const later = (await directory.recordHealth('m_flap', url, failing))!.clock!;
    expect(await directory.recordHealth('m_flap', url, { kind: 'succeeded', agoMs: 120_000 })).toMatchObject({ wrote: false, clock: later });
  });

  it('opens no webhook secret where it only shows settings (the API), and still answers one when asked', async () => {
    await put('m_sealed', 'https://sealed.example.com/');
    await rotateFirst(settings, 'm_sealed', 3_600);
    const { dir: api, opens } = await program({ openSecrets: false });
    expect(opens.calls).toBe(0);
    const viewing = new MerchantSettings(api, { allowHttp: false, allowPrivateTargets: false });
    expect(viewing.list().length).toBeGreaterThanOrEqual(1);
    expect(viewing.get('m_sealed')?.endpoints[0]?.previousSecrets).toHaveLength(1);
    await patchFirst(viewing, 'm_sealed', { events: ['payout'] });
    expect(viewing.get('m_sealed')?.endpoints[0]?.events).toEqual(['payout']);
    const opensByWrite = opens.calls;
    expect(viewing.list().map((view) => view.id)).toContain('m_sealed');
    expect(opens.calls).toBe(opensByWrite);
    // Read, a secret is opened then, and is the one the dispatchers sign with.
    await waitFor('the writer to hold the change', () => directory.byId('m_sealed')?.endpoints[0]?.events?.length === 1, 30_000);
    expect(api.byId('m_sealed')?.endpoints[0]?.secret).toBe(directory.byId('m_sealed')?.endpoints[0]?.secret);
    expect(api.byId('m_sealed')?.endpoints[0]?.previousSecrets?.[0]?.secret).toBe(directory.byId('m_sealed')?.endpoints[0]?.previousSecrets?.[0]?.secret);
  });

  it('says which merchants it serves at an old version when their new row is sealed with a key it lacks', async () => {
    await put('m_rekeyed', 'https://old-key.example.com/');
    const lines: Array<Record<string, unknown>> = [];
    const { dir: oldKeyOnly } = await program({ logger: capturingLogger(lines) });
    // An API replica with the old key alone, as the programs run.
    const prefix = uniquePrefix('merchant-directory');
    const api = await waitReady(await startTestApi(prefix, [], {}, { DATABASE_URL: db.url, SECRETS_KEY: TEST_SECRETS_KEY, WEBHOOKS_DEV: 'true' }));
    open.push({ close: async () => {
      await api.stop();
      const broker = await TestBroker.open();
      await broker.deleteTopology(prefix);
      await broker.close();
    } });
    const { dir: rotated } = await program({ keys: [NEW_KEY, KEY] });
    const newKeySettings = new MerchantSettings(rotated, { allowHttp: false, allowPrivateTargets: false });
    await patchFirst(newKeySettings, 'm_rekeyed', { url: 'https://new-key.example.com/' });

    await waitFor('the program with the old key alone to report it', () => oldKeyOnly.unreadable.some((u) => u.merchantId === 'm_rekeyed'), 30_000);
    expect(urlIn(oldKeyOnly, 'm_rekeyed')).toBe('https://old-key.example.com/');
    expect(oldKeyOnly.unreadable).toEqual([{ merchantId: 'm_rekeyed', version: 3, keyId: expect.any(String) }]);
    const errors = lines.filter((line) => line.level === 'error');
    expect(errors).toEqual([expect.objectContaining({ message: 'merchant row sealed with a key this program lacks (SECRETS_KEY, SECRETS_KEY_PREVIOUS): serving its last readable version', merchantId: 'm_rekeyed', version: 3 })]);
    expect(JSON.stringify(lines)).not.toContain('whsec_');
    // The replica says so where an orchestrator and Prometheus look, and leaves the load balancer.
    const ready = await waitFor('the API replica to be not ready', async () => {
      const answer = await call(api, '/readyz', { method: 'GET' });
      return answer.status === 503 && answer;
    }, 30_000, 100);
    expect(ready.body).toMatchObject({ status: 'not ready', broker: 'connected', database: 'reachable', merchants: expect.stringMatching(/^1 merchant row\(s\) sealed with a key this replica lacks/) });
    expect((await call(api, '/metrics', { method: 'GET' })).body as string).toMatch(/^webhooks_merchants_unreadable\{[^}]*\} 1$/m);
    // A write that reaches it all the same (ADMIN_PORT, a request already on its way, a retried
    // Idempotency-Key) is a 503 to try again, where a replica with the key answers, and changes nothing.
    const admin = { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' };
    const refused = await call(api, '/admin/merchants/m_rekeyed', { method: 'PATCH', headers: admin, body: JSON.stringify({ publicKey: 'pk_m_rekeyed_000001' }) });
    expect([refused.status, (refused.body as { error: { code: string } | null }).error?.code, Number(refused.headers.get('retry-after')) > 0]).toEqual([503, 'service_unavailable', true]);
    expect((await db.query<{ version: string }>('SELECT version FROM merchants WHERE id = $1', ['m_rekeyed']))[0]!.version).toBe('3');

    // Sealed with the tests' key again (a write from a program that has it first): readable, no longer reported.
    const { dir: back } = await program({ keys: [KEY, NEW_KEY] });
    await patchFirst(new MerchantSettings(back, { allowHttp: false, allowPrivateTargets: false }), 'm_rekeyed', { url: 'https://old-key-again.example.com/' });
    await waitFor('the report to end', () => oldKeyOnly.unreadable.length === 0 && urlIn(oldKeyOnly, 'm_rekeyed') === 'https://old-key-again.example.com/', 30_000);
    await waitFor('the API replica to be ready again', async () => (await call(api, '/readyz', { method: 'GET' })).status === 200, 30_000, 100);
  });
});
