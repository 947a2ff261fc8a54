import { lowerEndpointRate, SecretBox } from '../../libs/merchants/index.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { TestBroker } from '../support/broker.js';
import { merchantsCli } from '../support/merchants-cli.js';
import { freePort } from '../support/receiver.js';
import { runCliInProcess } from '../support/cli.js';
import { waitFor } from '../support/wait.js';

describe('webhooks merchants (operator CLI on the merchants table)', () => {
  const fixture = merchantsCli('cli-merchants');
  const { cli, env, prefix } = fixture;

  it('says there is nobody yet with exit 3', async () => {
    const result = await cli('list');
    expect(result.code).toBe(3);
    expect(result.stderr).toContain('no merchant in the database');
  });

  it('creates a merchant, then its endpoint printing its secret once, and a running program applies both', async () => {
    const created = await cli('set', 'm_cli', '--public-key', 'pk_cli_0001');
    expect(created.code).toBe(0);
    expect(created.stderr).toContain('merchant m_cli created; add an endpoint with `webhooks merchants endpoints add`');
    expect(created.stdout).not.toContain('whsec_');
    const result = await cli('endpoints', 'add', 'm_cli', '--url', 'https://hooks.example.com/cli', '--events', 'payout,refund.completed');
    expect(result.code).toBe(0);
    const secret = /webhook secret: (whsec_\S+)/.exec(result.stdout)?.[1];
    expect(secret).toBeDefined();
    await waitFor('program applied it', () => fixture.program.byId('m_cli')?.endpoints[0]?.secret === secret, 5_000);
    expect(fixture.program.byPublicKey('pk_cli_0001')?.endpoints[0]?.events).toEqual(['payout', 'refund.completed']);

    const shown = await cli('get', 'm_cli', '--json');
    expect(shown.code).toBe(0);
    expect(shown.stdout).not.toContain('whsec_');
    expect(JSON.parse(shown.stdout)).toEqual({
      id: 'm_cli',
      publicKey: 'pk_cli_0001',
      endpoints: [{ id: await fixture.firstEndpoint('m_cli'), description: null, url: 'https://hooks.example.com/cli', enabled: true, events: ['payout', 'refund.completed'], previousSecretExpiresAt: null, previousSecrets: [], disabledReason: null, disabledAt: null, failingSince: null, orderByReference: false, maxPerSecond: null, currentPerSecond: null }],
    });
    const table = await cli('get', 'm_cli');
    expect(table.stdout).toMatch(/m_cli\s+pk_cli_0001\s+1\s+1/);
    expect(table.stdout).toMatch(/ep_\S+\s+true\s+-\s+payout,refund.completed\s+none\s+-\s+-\s+https:\/\/hooks.example.com\/cli/);
  });

  it('changes one setting of an endpoint and keeps the others, and the secret; set keeps the endpoints', async () => {
    const before = fixture.program.byId('m_cli')!.endpoints[0]!.secret;
    const result = await cli('endpoints', 'set', 'm_cli', await fixture.firstEndpoint('m_cli'), '--disable');
    expect(result.code).toBe(0);
    expect(result.stdout).not.toContain('whsec_');
    await waitFor('program applied it', () => fixture.program.byId('m_cli')?.endpoints[0]?.enabled === false, 5_000);
    expect(fixture.program.byId('m_cli')!.endpoints[0]).toMatchObject({ url: 'https://hooks.example.com/cli', events: ['payout', 'refund.completed'], secret: before });
    const again = await cli('set', 'm_cli');
    expect([again.code, again.stderr.trim()]).toEqual([0, 'merchant m_cli updated']);
    expect(fixture.program.byId('m_cli')!.endpoints).toHaveLength(1);
    const list = await cli('list');
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^MERCHANT\s+PUBLIC KEY\s+ENDPOINTS\s+ENABLED/);
    expect(list.stdout).toMatch(/m_cli\s+pk_cli_0001\s+1\s+0/);
  });

  it('turns order per reference on and off, and keeps it when another setting changes', async () => {
    const endpoint = await fixture.firstEndpoint('m_cli');
    const on = await cli('endpoints', 'set', 'm_cli', endpoint, '--order-by-reference');
    expect(on.code).toBe(0);
    expect(on.stdout).toMatch(/ep_\S+\s+false\s+manual\s+payout,refund.completed\s+per-reference/);
    await waitFor('program orders it', () => fixture.program.byId('m_cli')?.endpoints[0]?.orderByReference === true, 5_000);
    expect((await cli('endpoints', 'set', 'm_cli', endpoint, '--events', 'payout')).code).toBe(0);
    await waitFor('program applied the events', () => fixture.program.byId('m_cli')?.endpoints[0]?.events?.length === 1, 5_000);
    expect(fixture.program.byId('m_cli')!.endpoints[0]!.orderByReference).toBe(true);
    expect((await cli('endpoints', 'set', 'm_cli', endpoint, '--no-order-by-reference', '--events', 'payout,refund.completed')).code).toBe(0);
    await waitFor('program no longer orders it', () => fixture.program.byId('m_cli')?.endpoints[0]?.orderByReference === undefined, 5_000);
    // The throttle too, on and off.
    expect((await cli('endpoints', 'set', 'm_cli', endpoint, '--max-per-second', '7')).code).toBe(0);
    await waitFor('program throttles it', () => fixture.program.byId('m_cli')?.endpoints[0]?.maxPerSecond === 7, 5_000);
    expect((await cli('endpoints', 'set', 'm_cli', endpoint, '--max-per-second', '0')).code).toBe(2);
    expect((await cli('endpoints', 'set', 'm_cli', endpoint, '--unthrottled')).code).toBe(0);
    await waitFor('program no longer throttles it', () => fixture.program.byId('m_cli')?.endpoints[0]?.maxPerSecond === undefined, 5_000);
  });

  it('rotates the secret with a grace period during which both sign', async () => {
    const before = fixture.program.byId('m_cli')!.endpoints[0]!.secret;
    const result = await cli('endpoints', 'rotate-secret', 'm_cli', await fixture.firstEndpoint('m_cli'), '--grace', '1h');
    expect(result.code).toBe(0);
    const secret = /webhook secret: (whsec_\S+)/.exec(result.stdout)?.[1];
    await waitFor('program applied it', () => fixture.program.byId('m_cli')?.endpoints[0]?.secret === secret, 5_000);
    expect(fixture.program.byId('m_cli')!.endpoints[0]!.previousSecrets?.[0]?.secret).toBe(before);
    expect(Date.parse(fixture.program.byId('m_cli')!.endpoints[0]!.previousSecrets![0]!.expiresAt) - Date.now()).toBeGreaterThan(3_500_000);
  });

  it('refuses what the admin API refuses, naming the field, and writes nothing', async () => {
    const noKey = await cli('set', 'm_new');
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toContain('merchant m_new is new: give --public-key');
    // The single webhook's options are gone from set: endpoints are `merchants endpoints`.
    const old = await cli('set', 'm_new', '--public-key', 'pk_new_00001', '--url', 'https://hooks.example.com/new');
    expect(old.code).toBe(2);
    expect(old.stderr).toContain("unknown option '--url'");
    const taken = await cli('set', 'm_new', '--public-key', 'pk_cli_0001');
    expect(taken.code).toBe(1);
    expect(taken.stderr).toContain('another merchant has this public key');
    const plain = await cli('endpoints', 'add', 'm_cli', '--url', 'http://hooks.example.com/new');
    expect(plain.code).toBe(2);
    expect(plain.stderr).toContain('url must be an https URL');
    const badEvent = await cli('endpoints', 'add', 'm_cli', '--url', 'https://hooks.example.com/new', '--events', 'charge.failed');
    expect(badEvent.code).toBe(2);
    expect((await cli('get', 'm_nobody')).code).toBe(3);
    expect((await cli('endpoints', 'rotate-secret', 'm_nobody', 'ep_nobody_1')).code).toBe(3);
    expect((await cli('endpoints', 'rotate-secret', 'm_cli', await fixture.firstEndpoint('m_cli'), '--grace', 'forever')).code).toBe(2);
    expect(fixture.program.byId('m_new')).toBeUndefined();
    expect(fixture.program.byId('m_cli')!.endpoints).toHaveLength(1);
  });

  it("creates no merchant whose id the admin API, the portal and the log could not name (the API's rule), and writes nothing", async () => {
    for (const id of ['bad id!', '.hidden', 'x'.repeat(201)]) {
      const result = await cli('set', id, '--public-key', 'pk_bad_id_0001');
      expect({ id, code: result.code, stderr: result.stderr }).toEqual({ id, code: 2, stderr: expect.stringContaining('webhooks: The merchant id must be 1 to 200 letters, digits') });
      expect((await cli('get', id)).code).toBe(3);
    }
  });

  it('honours development mode as the API does: loopback http URLs with WEBHOOKS_DEV=true, never with NODE_ENV=development alone', async () => {
    const addIn = (extra: Record<string, string>, id: string, url: string) => runCliInProcess({ ...env, ...extra }, ['merchants', 'endpoints', 'add', id, '--url', url]);
    expect((await cli('set', 'm_dev', '--public-key', 'pk_dev_00001')).code).toBe(0);
    expect((await cli('set', 'm_node', '--public-key', 'pk_node_0001')).code).toBe(0);
    const dev = await addIn({ WEBHOOKS_DEV: 'true' }, 'm_dev', 'http://127.0.0.1:4400/webhooks');
    expect(dev.stderr).toContain('of merchant m_dev added');
    expect(dev.code).toBe(0);
    const node = await addIn({ NODE_ENV: 'development' }, 'm_node', 'http://127.0.0.1:4401/webhooks');
    expect(node.code).toBe(2);
    expect(node.stderr).toContain('https');
    const later = await addIn({ WEBHOOKS_DEV: 'true' }, 'm_node', 'http://127.0.0.1:4401/webhooks');
    expect(later.code).toBe(0);
    await waitFor('program applied both', () => fixture.program.byId('m_dev')?.endpoints[0] !== undefined && fixture.program.byId('m_node')?.endpoints.length === 1, 5_000);
    expect(fixture.program.byId('m_dev')!.endpoints[0]!.url).toBe('http://127.0.0.1:4400/webhooks');
  });

  it('checks only what changes: --disable works on an endpoint whose URL only development mode accepts, a new URL is checked', async () => {
    // m_dev's endpoint was added in development mode; this operator's shell is not in it.
    const endpoint = await fixture.firstEndpoint('m_dev');
    const disabled = await cli('endpoints', 'set', 'm_dev', endpoint, '--disable');
    expect(disabled.code).toBe(0);
    await waitFor('program applied it', () => fixture.program.byId('m_dev')?.endpoints[0]?.enabled === false, 5_000);
    expect(fixture.program.byId('m_dev')!.endpoints[0]!.url).toBe('http://127.0.0.1:4400/webhooks');
    const narrowed = await cli('endpoints', 'set', 'm_dev', endpoint, '--events', 'payout');
    expect(narrowed.code).toBe(0);

    const moved = await cli('endpoints', 'set', 'm_dev', endpoint, '--url', 'http://127.0.0.1:4402/webhooks');
    expect(moved.code).toBe(2);
    expect(moved.stderr).toContain('url must be an https URL');
    expect(fixture.program.byId('m_dev')!.endpoints[0]!.url).toBe('http://127.0.0.1:4400/webhooks');
  });

  it('lists with --disabled --json only the endpoints that are off, not the enabled ones beside them', async () => {
    await fixture.withEndpoint('m_half', 'pk_cli_half_0001', '--url', 'https://hooks.example.com/half-off');
    const off = await fixture.firstEndpoint('m_half');
    expect((await cli('endpoints', 'add', 'm_half', '--url', 'https://hooks.example.com/half-on')).code).toBe(0);
    expect((await cli('endpoints', 'set', 'm_half', off, '--disable')).code).toBe(0);

    const listed = await cli('list', '--disabled', '--json');

    expect(listed.code).toBe(0);
    const views = JSON.parse(listed.stdout) as Array<{ id: string; endpoints: Array<{ id: string; enabled: boolean }> }>;
    expect(views.find((v) => v.id === 'm_half')!.endpoints.map((e) => e.id)).toEqual([off]);
    expect(views.flatMap((v) => v.endpoints).every((e) => !e.enabled)).toBe(true);
  });

  it('lists the endpoints that are off with --disabled: why and since when; --enable turns one on and publishes endpoint.enabled', async () => {
    // As a dispatcher's auto-disable writes it.
    await fixture.withEndpoint('m_auto', 'pk_cli_auto_0001', '--url', 'https://hooks.example.com/auto');
    const endpoint = await fixture.firstEndpoint('m_auto');
    const url = 'https://hooks.example.com/auto';
    // Five days of failures, as PostgreSQL's clock stamps them.
    const failingSince = (await fixture.program.recordHealth('m_auto', url, { kind: 'failing', streakMs: 5 * 86_400_000, afterMs: 5 * 86_400_000 }))!.clock!.failingSince;
    await fixture.program.update('m_auto', (current) => ({
      ...current!,
      endpoints: [{ ...current!.endpoints[0]!, enabled: false, disabledReason: 'failing', disabledAt: '2026-01-06T00:00:00.000Z' }],
    }));
    const listed = await cli('list', '--disabled');
    expect(listed.code).toBe(0);
    const rows = listed.stdout.split('\n');
    expect(rows[0]).toMatch(/^MERCHANT\s+ENDPOINT\s+REASON\s+DISABLED AT\s+FAILING SINCE\s+URL/);
    expect(rows.find((r) => r.startsWith('m_auto'))).toMatch(new RegExp(`^m_auto\\s+${endpoint}\\s+failing\\s+2026-01-06T00:00:00.000Z\\s+${failingSince.replace(/\./g, '\\.')}\\s+https://hooks.example.com/auto`));
    expect(rows.find((r) => r.startsWith('m_dev'))).toMatch(/^m_dev\s+ep_\S+\s+manual\s+\d{4}-/);
    const off = () => fixture.program.list().filter((m) => m.endpoints.some((e) => !e.enabled)).map((m) => m.id);
    expect(rows.slice(1).filter((r) => r.trim() !== '').map((r) => r.split(/\s+/)[0])).toEqual(off());
    expect(fixture.program.list().some((m) => m.endpoints[0]?.enabled)).toBe(true);

    const test = await TestBroker.open();
    const queue = `${prefix}.cli-test-subscriber`;
    await test.channel.assertQueue(queue, { durable: false, autoDelete: true });
    await test.channel.bindQueue(queue, `${prefix}.operational`, 'endpoint.*');
    try {
      const enabled = await cli('endpoints', 'set', 'm_auto', endpoint, '--enable');
      expect(enabled.code).toBe(0);
      const [message] = await test.drain(queue, 1, 5_000);
      expect(message!.fields.routingKey).toBe('endpoint.enabled');
      expect(JSON.parse(message!.content.toString())).toMatchObject({ type: 'endpoint.enabled', data: { merchantId: 'm_auto', endpointId: endpoint, url: 'https://hooks.example.com/auto' } });
      await waitFor('program sees it on', () => fixture.program.byId('m_auto')?.endpoints[0]?.enabled === true, 5_000);
      expect(fixture.program.byId('m_auto')!.endpoints[0]).not.toHaveProperty('disabledReason');
      const after = await cli('list', '--disabled', '--json');
      expect(JSON.parse(after.stdout).map((v: { id: string }) => v.id)).toEqual(off());
      expect(off()).not.toContain('m_auto');
    } finally {
      await test.channel.deleteQueue(queue).catch(() => {});
      await test.close();
    }
  });

  it('lists every option of merchants set and merchants endpoints add in their --help; set has no webhook option left', async () => {
    const set = await runCliInProcess({}, ['merchants', 'set', '--help']);
    expect(set.code).toBe(0);
    expect(set.stdout).toContain('--public-key <key>');
    for (const gone of ['--url', '--no-webhook', '--enable', '--events', '--max-per-second']) expect(set.stdout).not.toContain(gone);
    const add = await runCliInProcess({}, ['merchants', 'endpoints', 'add', '--help']);
    for (const option of ['--url <url>', '--events <list>', '--description <text>', '--disabled', '--max-per-second <n>', '--order-by-reference']) expect(add.stdout).toContain(option);
    // Each endpoint rotates its own secret: `merchants endpoints rotate-secret`, no merchant-level one.
    const merchants = await runCliInProcess({}, ['merchants', '--help']);
    expect(merchants.stdout).toMatch(/^\s+endpoints\b/m);
    expect(merchants.stdout).not.toMatch(/^\s+rotate-secret\b/m);
  });

  it('says what it needs without DATABASE_URL or SECRETS_KEY, and that a wrong key opens no secret', async () => {
    const noDatabase = await runCliInProcess({ RABBITMQ_URL: env.RABBITMQ_URL!, TOPOLOGY_PREFIX: prefix }, ['merchants', 'list']);
    expect(noDatabase.code).toBe(2);
    expect(noDatabase.stderr).toContain('merchants commands need DATABASE_URL');
    const noKey = await runCliInProcess({ ...env, SECRETS_KEY: '' }, ['merchants', 'list']);
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toContain('SECRETS_KEY');
    const badKey = await runCliInProcess({ ...env, SECRETS_KEY: 'short' }, ['merchants', 'list']);
    expect(badKey.stderr).toContain('SECRETS_KEY: must be 32 random bytes');
    expect(badKey.code).not.toBe(0);
    const otherKey = await runCliInProcess({ ...env, SECRETS_KEY: Buffer.alloc(32, 7).toString('base64') }, ['merchants', 'list']);
    expect(otherKey.stderr).toContain('does not open with SECRETS_KEY or SECRETS_KEY_PREVIOUS');
    expect(otherKey.code).not.toBe(0);
    expect(otherKey.stderr).not.toContain('whsec_');
  });

  it("shows the rate an endpoint is sent at while its 429/503 answers slow it (currentPerSecond), as the admin API does", async () => {
    expect((await fixture.withEndpoint('m_slow', 'pk_cli_slow_0001', '--url', 'https://hooks.example.com/slow', '--max-per-second', '40')).code).toBe(0);
    const endpoint = await fixture.firstEndpoint('m_slow');
    // As a dispatcher writes it on a 429 from an endpoint sent 40 a second: halved.
    await lowerEndpointRate({ query: async (text, params) => ({ rows: await fixture.db.query(text, params) }) }, 'm_slow', 40, 40, endpoint);
    const slowed = { id: endpoint, maxPerSecond: 40, currentPerSecond: 20 };
    const got = await cli('get', 'm_slow', '--json');
    expect(JSON.parse(got.stdout).endpoints).toEqual([expect.objectContaining(slowed)]);
    const listed = await cli('list', '--json');
    expect(JSON.parse(listed.stdout).find((v: { id: string }) => v.id === 'm_slow').endpoints).toEqual([expect.objectContaining(slowed)]);
    const endpoints = await cli('endpoints', 'list', 'm_slow', '--json');
    expect(JSON.parse(endpoints.stdout)).toEqual([expect.objectContaining(slowed)]);
  });

  it('reads merchants while RabbitMQ is down (list, get, endpoints list); a write still needs it, to announce, and writes nothing without it', async () => {
    // A port nothing listens on (5699 was taken once by a broker of someone else's on a shared host).
    const down = { ...env, RABBITMQ_URL: `amqp://guest:guest@127.0.0.1:${await freePort()}` };
    // Each exited 1 after the 10 s a command waits for the broker it needs (CLI_BROKER_DEADLINE_MS).
    const reads = await Promise.all([['list'], ['get', 'm_cli'], ['endpoints', 'list', 'm_cli']].map((args) => runCliInProcess(down, ['merchants', ...args])));
    expect(reads.map((read) => [read.code, read.stderr])).toEqual([[0, ''], [0, ''], [0, '']]);
    expect(reads[1]!.stdout).toMatch(/m_cli\s+pk_cli_0001/);
    // m_cli's endpoint is off (above): turning it on is announced (endpoint.enabled), so it is refused whole.
    const endpoint = await fixture.firstEndpoint('m_cli');
    const write = await runCliInProcess(down, ['merchants', 'endpoints', 'set', 'm_cli', endpoint, '--enable']);
    expect(write.code).toBe(1);
    expect(write.stderr).toContain('RabbitMQ not reachable');
    expect(JSON.parse((await cli('get', 'm_cli', '--json')).stdout).endpoints[0]).toMatchObject({ id: endpoint, enabled: false });
  });

  it('names the merchant and endpoints of a sealed value neither key opens when reseal meets it, never a secret (exit 1)', async () => {
    await fixture.withEndpoint('m_lost', 'pk_lost_0001', '--url', 'https://hooks.example.com/lost');
    const endpoint = await fixture.firstEndpoint('m_lost');
    // Sealed with a third key (a restore from another deployment's backup): neither key of the rotation opens it.
    const [row] = await fixture.db.query<{ secrets: string }>('SELECT secrets FROM merchants WHERE id = $1', ['m_lost']);
    const plain = new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')).open(row!.secrets, 'm_lost');
    await fixture.db.query('UPDATE merchants SET secrets = $2 WHERE id = $1', ['m_lost', new SecretBox(Buffer.alloc(32, 5)).seal(plain, 'm_lost')]);
    const newKey = Buffer.alloc(32, 6).toString('base64');
    try {
      const result = await runCliInProcess({ ...env, SECRETS_KEY: newKey, SECRETS_KEY_PREVIOUS: TEST_SECRETS_KEY }, ['merchants', 'reseal']);
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(
        new RegExp(`^webhooks: a stored secret does not open with SECRETS_KEY or SECRETS_KEY_PREVIOUS \\(sealed with key \\S+\\): the webhook secrets of merchant m_lost \\(endpoint ${endpoint}\\), sealed together in its row of merchants\n$`),
      );
      expect(result.stderr).not.toContain('whsec_');
    } finally {
      // Back to the tests' key for the rows resealed before it; m_lost, which none opens, deleted.
      expect((await cli('delete', 'm_lost', '--yes')).code).toBe(0);
      expect((await runCliInProcess({ ...env, SECRETS_KEY: TEST_SECRETS_KEY, SECRETS_KEY_PREVIOUS: newKey }, ['merchants', 'reseal'])).code).toBe(0);
    }
  });

  it('deletes a merchant without a statement timeout, as migrate runs: a large merchant\'s DELETE takes what it takes', async () => {
    expect((await cli('set', 'm_big', '--public-key', 'pk_big_0001')).code).toBe(0);
    // Stands in for a DELETE longer than the programs' 30 s: it refuses to run under any statement timeout.
    await fixture.db.query(`CREATE FUNCTION refuse_timed_delete() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF current_setting('statement_timeout') <> '0' THEN RAISE EXCEPTION 'deleted under statement_timeout %', current_setting('statement_timeout'); END IF;
        RETURN OLD;
      END $$`);
    await fixture.db.query(`CREATE TRIGGER refuse_timed_delete BEFORE DELETE ON merchants FOR EACH ROW WHEN (OLD.id = 'm_big') EXECUTE FUNCTION refuse_timed_delete()`);
    try {
      const result = await cli('delete', 'm_big', '--yes');
      expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 0, stderr: expect.stringContaining('merchant m_big:') });
      expect(await fixture.db.query('SELECT id FROM merchants WHERE id = $1', ['m_big'])).toEqual([]);
    } finally {
      await fixture.db.query('DROP TRIGGER refuse_timed_delete ON merchants');
      await fixture.db.query('DROP FUNCTION refuse_timed_delete()');
    }
  });

  it('prints what its delete removed and says to run it again when only the sweep 2 s after the committed delete fails (exit 1)', async () => {
    expect((await cli('set', 'm_swept', '--public-key', 'pk_swept_0001')).code).toBe(0);
    // The first pass's DELETE passes, the sweep's fails: as a connection lost in those 2 s (a sequence counts across transactions).
    await fixture.db.query('CREATE SEQUENCE sweep_deletes');
    await fixture.db.query(`CREATE FUNCTION fail_the_sweep() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF nextval('sweep_deletes') > 1 THEN RAISE EXCEPTION 'connection lost in the sweep'; END IF;
        RETURN NULL;
      END $$`);
    await fixture.db.query('CREATE TRIGGER fail_the_sweep BEFORE DELETE ON merchant_idempotency FOR EACH STATEMENT EXECUTE FUNCTION fail_the_sweep()');
    try {
      const result = await cli('delete', 'm_swept', '--yes');
      expect(result.code).toBe(1);
      expect(result.stdout).toMatch(/^TABLE\s+ROWS DELETED\n/);
      expect(result.stdout).toMatch(/\nmerchants\s+1\n/);
      expect(result.stderr).toBe(
        'webhooks: merchant m_swept: 1 row(s) deleted and committed; the sweep 2 s later, for a write that raced the delete, failed ' +
          '(connection lost in the sweep): run `webhooks merchants delete m_swept --yes` again\n',
      );
      expect(await fixture.db.query('SELECT id FROM merchants WHERE id = $1', ['m_swept'])).toEqual([]);
    } finally {
      await fixture.db.query('DROP TRIGGER fail_the_sweep ON merchant_idempotency');
      await fixture.db.query('DROP FUNCTION fail_the_sweep()');
      await fixture.db.query('DROP SEQUENCE sweep_deletes');
    }
  });
});
