import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { listAudit, MERCHANT_TABLES, MerchantSettings, PgMerchantDirectory, SecretBox, TABLES_KEPT_AFTER_DELETE, TABLES_WITHOUT_MERCHANT_DATA } from '../../libs/merchants/index.js';
import { PortalSessions, TokenSigner } from '../../libs/portal/index.js';
import { takeCell } from '../../libs/rate-limit/index.js';
import { runCliInProcess } from '../support/cli.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';
import { putWithEndpoint, rotateFirst } from '../support/merchant-endpoints.js';

/**
 * `webhooks merchants delete` (docs/production.md, "Deleting a merchant's data"): afterwards no row
 * of the merchant remains in any table the programs make, and another merchant's rows all remain.
 */
describe('webhooks merchants delete', () => {
  // A ':' in the id: rate_limits keys are `<limit>:<merchant id>`.
  const GONE = 'm:gone';
  const KEPT = 'm_kept';
  let db: TestDatabase;
  let database: Database;
  let directory: PgMerchantDirectory;
  const env: Record<string, string> = { SECRETS_KEY: TEST_SECRETS_KEY };
  const cli = (...args: string[]) => runCliInProcess(env, ['merchants', 'delete', ...args]);

  beforeAll(async () => {
    db = await createTestDatabase('merchant_delete');
    env.DATABASE_URL = db.url;
    database = openPostgres(db.url);
    directory = new PgMerchantDirectory(database, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger());
    await directory.start();
    const settings = new MerchantSettings(directory, { allowHttp: false, allowPrivateTargets: false });
    const portal = new PortalSessions(database, new TokenSigner(Buffer.from(TEST_SECRETS_KEY, 'base64')));
    for (const [id, n] of [[GONE, 1], [KEPT, 2]] as const) {
      // Settings, a sealed secret, an audit entry and Idempotency-Key answers (a rotation's holds the new secret).
      await putWithEndpoint(settings, id, { publicKey: `pk_delete_${n}_0000`, url: `https://hooks${n}.example.com/` }, { idempotencyKey: `create-${n}`, actor: { actor: 'cli' } });
      await rotateFirst(settings, id, 60, { idempotencyKey: `rotate-${n}`, actor: { actor: 'cli' } });
      const link = await portal.createLink(id, ['resend'], 60_000, 'digest');
      await portal.redeem(link.token);
      await db.query(`INSERT INTO rate_limits (key, tat) VALUES ($1, now()), ($2, now())`, [`resend:${id}`, `portal-settings:${id}`]);
      await db.query(`INSERT INTO endpoint_health (merchant_id, url, failing_since, last_failure_at) VALUES ($1, $2, now(), now())`, [id, `https://hooks${n}.example.com/`]);
      await db.query('INSERT INTO endpoint_rates (merchant_id, rate, ceiling) VALUES ($1, 5, 10)', [id]);
      await db.query(
        `INSERT INTO delivery_webhooks (merchant_id, webhook_id, first_seen_at, seq, event, refs, merchant_refs, payload, status, attempts, last_record_at)
         VALUES ($1, 'evt_1', now(), $2, 'payout', '{ref}', ARRAY[$1 || chr(31) || 'ref'], '{"amount":1}', 'failed', 1, now())`,
        [id, n],
      );
      await db.query(`CREATE TABLE IF NOT EXISTS delivery_records_test PARTITION OF delivery_records FOR VALUES FROM ('2000-01-01') TO ('2100-01-01')`);
      await db.query(`INSERT INTO delivery_records (id, at, merchant_id, webhook_id, outcome, attempt_number) VALUES (gen_random_uuid(), now(), $1, 'evt_1', 'failed', 1)`, [id]);
      await db.query(`INSERT INTO failed_webhooks (merchant_id, webhook_id, failed_at, event, merchant_refs, content) VALUES ($1, 'evt_1', now(), 'payout', '{}', '{"amount":1}')`, [id]);
      await db.query(`INSERT INTO webhook_waits (merchant_id, webhook_id, attempt, due_at, reason, headers) VALUES ($1, 'evt_1', 1, now(), 'retry', '{}')`, [id]);
      await db.query(`INSERT INTO webhook_bodies (merchant_id, webhook_id, content) VALUES ($1, 'evt_1', '\\x7b7d')`, [id]);
      await db.query(`INSERT INTO wait_circuits (merchant_id, probe_at) VALUES ($1, now())`, [id]);
      await db.query(`INSERT INTO delivery_log_quarantine (stream, stream_offset, position, merchant_id, error, content) VALUES ('s', $2, 0, $1, 'e', 'c')`, [id, n]);
      await db.query(`CREATE TABLE IF NOT EXISTS intake_keys_test PARTITION OF intake_keys FOR VALUES FROM ('2000-01-01') TO ('2100-01-01')`);
      await db.query(`INSERT INTO intake_keys (day, merchant_id, webhook_id) VALUES (date_trunc('day', now(), 'UTC'), $1, 'evt_1')`, [id]);
      await db.query("INSERT INTO webhook_order (merchant_id, order_key, webhook_id) VALUES ($1, 'REF-1', 'evt_1')", [id]);
    }
  });

  afterAll(async () => {
    await directory?.close();
    await database?.close();
    await db?.drop();
  });

  /** Every table of the database, partitions left out (a delete on their parent reaches them). */
  const tables = async () =>
    (await db.query<{ name: string }>(`SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1`)).map((r) => r.name);

  /** Rows that name the merchant anywhere in them, or (sealed, hashed) belong to it by their merchant_id. */
  const rowsOf = async (merchantId: string) => {
    const found: Record<string, number> = {};
    for (const table of await tables()) {
      const [row] = await db.query<{ n: number }>(`SELECT count(*)::integer AS n FROM ${table} t WHERE strpos(t::text, $1) > 0`, [merchantId]);
      if (row!.n > 0) found[table] = row!.n;
    }
    const [sealed] = await db.query<{ n: number }>('SELECT count(*)::integer AS n FROM merchant_idempotency WHERE merchant_id = $1', [merchantId]);
    if (sealed!.n > 0) found.merchant_idempotency = sealed!.n;
    return found;
  };

  it('knows every table the migrations make: each is deleted from, or holds no merchant data', async () => {
    const known = [...MERCHANT_TABLES.map((t) => t.table), ...TABLES_WITHOUT_MERCHANT_DATA, ...TABLES_KEPT_AFTER_DELETE, 'delivery_records_test'];
    expect((await tables()).filter((table) => !known.includes(table))).toEqual([]);
  });

  it('refuses without --yes, and deletes nothing', async () => {
    const result = await cli(GONE);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--yes');
    expect(Object.keys(await rowsOf(GONE)).sort()).toEqual([...MERCHANT_TABLES.map((t) => t.table), ...TABLES_KEPT_AFTER_DELETE].sort());
  });

  it('leaves no row of the merchant in any table, and every row of another', async () => {
    const before = await rowsOf(KEPT);
    const result = await cli(GONE, '--yes');
    expect(result.stderr).toContain(`merchant ${GONE}:`);
    expect(result.code).toBe(0);
    // Nothing but its audit trail, which holds no secret and now ends with the delete and its actor.
    const trailBefore = await listAudit(database, GONE, 100);
    expect(Object.keys(await rowsOf(GONE))).toEqual(['merchant_audit']);
    expect(trailBefore[0]).toMatchObject({ actor: 'cli', action: 'merchant.deleted', changes: { rowsDeleted: { merchants: 1, portal_sessions: 1 } } });
    expect(trailBefore.map((e) => e.action)).toEqual(['merchant.deleted', 'secret.rotated', 'endpoint.created', 'merchant.created']);
    expect(JSON.stringify(trailBefore)).not.toMatch(/whsec_/);
    expect(await rowsOf(KEPT)).toEqual(before);
    expect(Object.keys(before).sort()).toEqual([...MERCHANT_TABLES.map((t) => t.table), ...TABLES_KEPT_AFTER_DELETE].sort());
  });

  it('is forgotten by a running program, through the delete\'s NOTIFY: no restart needed', async () => {
    // The directory started before the delete (as an API or a dispatcher that runs on): it finds
    // no row of the merchant by polling, so the notification names it.
    await waitFor('the running directory to forget the deleted merchant', () => directory.byId(GONE) === undefined, 10_000);
    expect(directory.byPublicKey('pk_delete_1_0000')).toBeUndefined();
    expect(directory.byId(KEPT)?.publicKey).toBe('pk_delete_2_0000');
  });

  it("deletes its endpoints' throttle rows, counted, and none of a merchant whose id starts with the same text", async () => {
    // The throttle's keys: `throttle:<merchant>\u001f<endpoint>` and `throttle-queue:<merchant>\u001f<endpoint>`.
    const keysOf = (id: string) => [`throttle:${id}\u001fep_1`, `throttle-queue:${id}\u001fep_1`, `throttle:${id}\u001fep_2`, `resend:${id}`];
    const limit = { intervalMs: 1_000, burstMs: 1_000 };
    for (const id of ['m_thr', 'm_thr2', 'm_thr:x']) for (const key of keysOf(id)) await takeCell(database, key, limit);
    const result = await cli('m_thr', '--yes');
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^rate_limits\s+4$/m);
    expect(result.stderr).toContain('merchant m_thr: 4 row(s) deleted');
    const left = await db.query<{ key: string }>("SELECT key FROM rate_limits WHERE strpos(key, 'm_thr') > 0");
    expect(left.map((row) => row.key).sort()).toEqual([...keysOf('m_thr2'), ...keysOf('m_thr:x')].sort());
  });

  it('says so with exit 3 when nothing of the merchant is left', async () => {
    const result = await cli(GONE, '--yes');
    expect(result.code).toBe(3);
    expect(result.stderr).toContain(`no row of merchant ${GONE} in any table`);
  });
});
