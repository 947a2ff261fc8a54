import { BrokerConnection } from '../../libs/broker/index.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import { declareTopology } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { runProgram } from '../support/process.js';
import { waitFor } from '../support/wait.js';

const CLI = 'dist/apps/cli/main.js';

/** `webhooks merchants endpoints …` on the merchants table, seen by a running program's directory. */
describe('webhooks merchants endpoints (operator CLI)', () => {
  const prefix = uniquePrefix('cli-endpoints');
  const env: Record<string, string> = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, SECRETS_KEY: TEST_SECRETS_KEY };
  let broker: BrokerConnection;
  let db: TestDatabase;
  let database: Database;
  let program: PgMerchantDirectory;
  const cli = async (...args: string[]) => {
    const result = await runProgram(CLI, env, ['merchants', ...args]);
    if (result.code === 1) console.log(`webhooks merchants ${args.join(' ')} exited 1: ${result.stderr}`);
    return result;
  };

  beforeAll(async () => {
    db = await createTestDatabase('cli_endpoints');
    env.DATABASE_URL = db.url;
    broker = new BrokerConnection({ url: brokerUrl(), name: 'test-cli-endpoints', logger: silentLogger(), declare: (open) => declareTopology(open, { prefix, failedRetention: '1D' }) });
    await broker.open(10_000);
    database = openPostgres(db.url);
    program = new PgMerchantDirectory(database, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger());
    await program.start();
  });

  afterAll(async () => {
    await program?.close();
    await database?.close();
    await broker?.close();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await db?.drop();
  });

  it("adds an endpoint with its own secret, changes, rotates and deletes it, and a running program applies each", async () => {
    expect((await cli('set', 'm_cep', '--public-key', 'pk_cli_ep_0001', '--no-webhook')).code).toBe(0);
    const added = await cli('endpoints', 'add', 'm_cep', '--url', 'https://hooks.example.com/orders', '--events', 'payout', '--description', 'orders');
    expect(added.code).toBe(0);
    const id = /\b(ep_[A-Za-z0-9_-]+)\b/.exec(added.stdout)?.[1];
    const secret = /webhook secret: (whsec_\S+)/.exec(added.stdout)?.[1];
    expect(id).toBeDefined();
    await waitFor('program has the endpoint', () => program.byId('m_cep')?.endpoints.find((e) => e.id === id)?.secret === secret, 15_000);
    expect(program.byId('m_cep')!.endpoints[0]).toMatchObject({ url: 'https://hooks.example.com/orders', events: ['payout'], description: 'orders', enabled: true });

    // A URL the merchant already has is refused (the endpoint limit, MAX_ENDPOINTS_PER_MERCHANT, is 20 now that events fan out).
    const same = await cli('endpoints', 'add', 'm_cep', '--url', 'https://hooks.example.com/orders');
    expect(same.code).toBe(1);

    const off = await cli('endpoints', 'set', 'm_cep', id!, '--disable', '--all-events');
    expect(off.code).toBe(0);
    await waitFor('program sees it off', () => program.byId('m_cep')?.endpoints[0]?.enabled === false, 15_000);
    expect(program.byId('m_cep')!.endpoints[0]).toMatchObject({ disabledReason: 'manual' });
    expect(program.byId('m_cep')!.endpoints[0]!.events).toBeUndefined();

    const rotated = await cli('endpoints', 'rotate-secret', 'm_cep', id!, '--grace', '0');
    expect(rotated.code).toBe(0);
    const next = /webhook secret: (whsec_\S+)/.exec(rotated.stdout)?.[1];
    expect(next).not.toBe(secret);
    await waitFor('program signs with the new secret', () => program.byId('m_cep')?.endpoints[0]?.secret === next, 15_000);

    const listed = await cli('endpoints', 'list', 'm_cep', '--json');
    expect(JSON.parse(listed.stdout)).toEqual([expect.objectContaining({ id, enabled: false, disabledReason: 'manual' })]);
    expect(listed.stdout).not.toContain('whsec_');

    expect((await cli('endpoints', 'delete', 'm_cep', id!)).code).toBe(0);
    await waitFor('program no longer has it', () => program.byId('m_cep')?.endpoints.length === 0, 15_000);
  });

  it('exits 3 for an unknown merchant or endpoint and 2 for a refused option', async () => {
    expect((await cli('endpoints', 'list', 'm_nobody')).code).toBe(3);
    expect((await cli('set', 'm_cep2', '--public-key', 'pk_cli_ep_0002', '--no-webhook')).code).toBe(0);
    const missing = await cli('endpoints', 'delete', 'm_cep2', 'ep_missing_1');
    expect(missing.code).toBe(3);
    expect(missing.stderr).toContain('has no endpoint ep_missing_1');
    expect((await cli('endpoints', 'add', 'm_cep2', '--url', 'https://hooks.example.com/x', '--events', 'charge.failed')).code).toBe(2);
    expect((await cli('endpoints', 'set', 'm_cep2', 'ep_missing_1')).code).toBe(2);
  });
});
