import { MIGRATIONS, migrate } from '../../libs/migrations/index.js';
import { useTestDatabase } from '../support/postgres.js';

/**
 * Migration 0013 (issue 56): the runtime state written while a merchant had one endpoint (waits,
 * their bytes, wait circuits, failing clocks, order rows) takes its endpoint's id, so that the
 * dispatchers, which now key it by (merchant, endpoint), go on with it: a wait's next hand-back
 * carries x-endpoint-id, its bytes are found, its circuit parks it, its clock counts.
 */
describe('migration 0013: state keyed by merchant becomes keyed by endpoint', () => {
  const postgres = useTestDatabase('endpoint_keys', {}, { migrated: false });

  it("gives each row its merchant's first endpoint (the platform's its own), and keeps '' where the merchant has none", async () => {
    const before = MIGRATIONS.filter((m) => m.version < 13);
    expect(before.map((m) => m.version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    await migrate(postgres.database, before);
    const endpoints = JSON.stringify([{ id: 'ep_m_one_main', url: 'https://one.example/hook', enabled: true }]);
    await postgres.database.query("INSERT INTO merchants (id, public_key, endpoints, version) VALUES ('m_one', 'pk_one_00001', $1::jsonb, 1), ('m_none', 'pk_none_0001', '[]', 1)", [endpoints]);
    for (const merchant of ['m_one', 'm_none', 'platform:operational']) {
      await postgres.database.query("INSERT INTO webhook_waits (merchant_id, webhook_id, attempt, due_at, pick_at, reason, headers) VALUES ($1, 'evt_1', 1, now(), now(), 'retry', '{\"x-attempts\": 1}')", [merchant]);
      await postgres.database.query("INSERT INTO webhook_bodies (merchant_id, webhook_id, content) VALUES ($1, 'evt_1', '\\x7b7d')", [merchant]);
    }
    await postgres.database.query("INSERT INTO wait_circuits (merchant_id, probe_at) VALUES ('m_one', now())");
    await postgres.database.query("INSERT INTO endpoint_health (merchant_id, url, failing_since) VALUES ('m_one', 'https://one.example/hook', now()), ('m_none', 'https://gone.example/hook', now())");
    await postgres.database.query("INSERT INTO webhook_order (merchant_id, order_key, webhook_id) VALUES ('m_one', 'REF-1', 'evt_1')");
    await postgres.database.query("INSERT INTO endpoint_rates (merchant_id, rate, ceiling) VALUES ('m_one', 5, 10)");

    await migrate(postgres.database);

    const waits = await postgres.database.query<{ merchant_id: string; endpoint_id: string; header: string | null }>(
      "SELECT merchant_id, endpoint_id, headers->>'x-endpoint-id' AS header FROM webhook_waits ORDER BY merchant_id");
    expect(waits.rows).toEqual([
      { merchant_id: 'm_none', endpoint_id: '', header: null },
      { merchant_id: 'm_one', endpoint_id: 'ep_m_one_main', header: 'ep_m_one_main' },
      { merchant_id: 'platform:operational', endpoint_id: 'ep_platform', header: 'ep_platform' },
    ]);
    const bodies = await postgres.database.query<{ merchant_id: string; endpoint_id: string }>('SELECT merchant_id, endpoint_id FROM webhook_bodies ORDER BY merchant_id');
    expect(bodies.rows.map((row) => row.endpoint_id)).toEqual(['', 'ep_m_one_main', 'ep_platform']);
    expect((await postgres.database.query('SELECT merchant_id, endpoint_id FROM wait_circuits')).rows).toEqual([{ merchant_id: 'm_one', endpoint_id: 'ep_m_one_main' }]);
    expect((await postgres.database.query('SELECT merchant_id, endpoint_id FROM endpoint_health ORDER BY merchant_id')).rows).toEqual([
      { merchant_id: 'm_none', endpoint_id: '' },
      { merchant_id: 'm_one', endpoint_id: 'ep_m_one_main' },
    ]);
    expect((await postgres.database.query('SELECT merchant_id, endpoint_id, webhook_id FROM webhook_order')).rows).toEqual([{ merchant_id: 'm_one', endpoint_id: 'ep_m_one_main', webhook_id: 'evt_1' }]);
    expect((await postgres.database.query('SELECT merchant_id, endpoint_id FROM endpoint_rates')).rows).toEqual([{ merchant_id: 'm_one', endpoint_id: 'ep_m_one_main' }]);
    // The order step of 0013 takes the endpoint: the migrated row ends, found by its new key.
    const stepped = await postgres.database.query<{ state: string }>(
      "SELECT state FROM webhook_order_step(ARRAY['m_one'], ARRAY['ep_m_one_main'], ARRAY['REF-1'], ARRAY['evt_2'], ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY['m_one'], ARRAY['ep_m_one_main'], ARRAY['evt_1'], 3600000)");
    expect(stepped.rows).toEqual([{ state: 'head' }]);
  });
});
