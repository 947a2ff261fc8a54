/**
 * The CLI against a deployment that is not quite what it expects, as an operator meets one: an API
 * URL that answers with something else (a proxy's page, another service), a database that
 * `webhooks migrate` has not run on or that does not answer, a time no database holds, a requeue
 * cut off midway. Each exits with its code and says in one line what is wrong (and what was done
 * before), never a JavaScript TypeError.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { freePort } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/** An HTTP server answering every request with `status` and `body`, as a proxy's login page or another service would. */
async function answering(status: number, body: string, type: string): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((_req, res) => res.writeHead(status, { 'content-type': type }).end(body));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** One line on stderr, no stack trace, no TypeError. */
function oneLine(stderr: string): void {
  expect(stderr).not.toMatch(/Cannot read properties|TypeError|is not a function|undefined|\n\s+at /);
  expect(stderr.trimEnd().split('\n')).toHaveLength(1);
}

describe('webhooks log and portal against an API URL that answers something else', () => {
  it.each([
    ['an HTML page', 200, '<html><body>Sign in</body></html>', 'text/html'],
    ['JSON without the log', 200, '{"data":{"status":"ok"}}', 'application/json'],
    ['JSON null', 200, 'null', 'application/json'],
  ])('log exits 1 naming the API when it answers %s, for a list, a reference and a webhook-id', async (_what, status, body, type) => {
    const api = await answering(status, body, type);
    try {
      for (const args of [[], ['--reference', 'PO-1'], ['--webhook-id', 'evt_1']]) {
        const result = await runCliInProcess({ WEBHOOKS_API_URL: api.url, WEBHOOKS_ADMIN_TOKEN: 'x' }, ['log', '--merchant', 'm_1', ...args]);
        expect({ args, code: result.code, stdout: result.stdout }).toEqual({ args, code: 1, stdout: '' });
        expect(result.stderr).toContain(`the API at ${api.url} answered ${status} without the delivery log`);
        oneLine(result.stderr);
      }
    } finally {
      await api.close();
    }
  });

  it.each([
    ['JSON null', 'null'],
    ['JSON without the link', '{"data":{}}'],
  ])('portal exits 1 when the API answers %s, for a link and for --revoke', async (_what, body) => {
    for (const [status, args] of [[201, []], [200, ['--revoke']]] as const) {
      const api = await answering(status, body, 'application/json');
      try {
        const result = await runCliInProcess({ WEBHOOKS_ADMIN_TOKEN: 'x' }, ['portal', '--merchant', 'm_1', '--api', api.url, ...args]);
        expect({ args, code: result.code, stdout: result.stdout }).toEqual({ args, code: 1, stdout: '' });
        expect(result.stderr).toContain(`the admin API answered ${status}`);
        oneLine(result.stderr);
      } finally {
        await api.close();
      }
    }
  });
});

describe('webhooks log through an API that says to wait (429 with Retry-After)', () => {
  it("waits as told and reads on, so that a reference's timelines are read past the API's burst of reads", async () => {
    const webhook = { webhookId: 'evt_1', endpointId: 'ep_1', event: 'payout', references: ['PO-1'], firstSeenAt: '2026-05-01T10:00:00.000Z', status: 'delivered', attempts: 1, firstAttemptAt: null, lastAttemptAt: null, lastHttpStatus: 200, lastError: null, nextAttemptAt: null };
    const { webhookId: _id, event: _event, references: _refs, firstSeenAt: _seen, ...delivery } = webhook;
    const detail = { ...webhook, payload: {}, deliveries: [delivery], records: [], duplicates: 0, lastDuplicateAt: null };
    let asked = 0;
    // Every other read is refused for a second, as the API's limiter does past its burst.
    const server = createServer((req, res) => {
      if (asked++ % 2 === 0) {
        res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' }).end(JSON.stringify({ message: 'Too many reads of the delivery log; try again later', error: { code: 'rate_limited' } }));
      } else {
        const data = req.url!.includes('/webhooks?') ? { webhooks: [webhook], nextCursor: null } : detail;
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data }));
      }
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const env = { WEBHOOKS_API_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, WEBHOOKS_ADMIN_TOKEN: 'x' };
      const result = await runCliInProcess(env, ['log', '--merchant', 'm_1', '--reference', 'PO-1']);
      expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
      expect(result.stdout).toContain('evt_1  payout  PO-1  first seen 2026-05-01T10:00:00.000Z  delivered, 1 attempt(s)');
      expect(asked).toBe(4);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('webhooks log given filters it would not apply', () => {
  it.each([
    [['--reference', 'PO-1']],
    [['--status', 'failed']],
  ])('refuses --webhook-id with %j (exit 2): the webhook would be shown whatever they say', async (extra) => {
    const result = await runCliInProcess({ WEBHOOKS_API_URL: `http://127.0.0.1:${await freePort()}` }, ['log', '--merchant', 'm_1', '--webhook-id', 'evt_1', ...extra]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`webhooks: --webhook-id names one webhook; give it without ${extra[0]}`);
  });
});

describe('webhooks log and portal behind a path (an ingress serving the API under /ops/webhooks)', () => {
  it('asks the API under the path of WEBHOOKS_API_URL, with its query, as portal does with it', async () => {
    const asked: string[] = [];
    const server = createServer((req, res) => {
      const { pathname, searchParams } = new URL(req.url!, 'http://api');
      asked.push(`${req.method} ${pathname} tenant=${searchParams.get('tenant')}`);
      if (searchParams.get('tenant') !== 't1') {
        res.writeHead(403, { 'content-type': 'application/json' }).end(JSON.stringify({ message: 'no tenant' }));
      } else if (pathname === '/ops/webhooks/admin/merchants/m_1/webhooks') {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: { webhooks: [], nextCursor: null } }));
      } else if (pathname === '/ops/webhooks/admin/merchants/m_1/portal-sessions') {
        res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ data: { url: 'https://portal.example/#token=t', expiresAt: '2026-05-01T11:00:00.000Z' } }));
      } else {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ message: 'Not found', error: { code: 'not_found' } }));
      }
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const api = `http://127.0.0.1:${(server.address() as AddressInfo).port}/ops/webhooks/?tenant=t1`;
      const env = { WEBHOOKS_API_URL: api, WEBHOOKS_ADMIN_TOKEN: 'x' };
      const portal = await runCliInProcess(env, ['portal', '--merchant', 'm_1']);
      expect(portal).toMatchObject({ code: 0, stdout: 'https://portal.example/#token=t\n' });
      const log = await runCliInProcess(env, ['log', '--merchant', 'm_1', '--json']);
      expect({ ...log, asked }).toEqual({ code: 3, stdout: '[]\n', stderr: 'webhooks: no webhook in the delivery log matches\n', asked: ['POST /ops/webhooks/admin/merchants/m_1/portal-sessions tenant=t1', 'GET /ops/webhooks/admin/merchants/m_1/webhooks tenant=t1'] });
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('the CLI on a database that is not ready', () => {
  let bare: TestDatabase;
  let migrated: TestDatabase;

  beforeAll(async () => {
    bare = await createTestDatabase('cli_faults_bare', undefined, { migrated: false });
    migrated = await createTestDatabase('cli_faults');
  });

  afterAll(async () => {
    await bare?.drop();
    await migrated?.drop();
  });

  it.each([
    [['failed', 'list']],
    [['failed', 'replay', '--merchant', 'm_1', '--since', '1h', '--dry-run']],
    [['waits', 'list']],
    [['log', '--merchant', 'm_1']],
  ])('%j on a database `webhooks migrate` has not run on says to run it (exit 1)', async (args) => {
    const result = await runCliInProcess({ DATABASE_URL: bare.url }, args);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('run npx webhooks migrate');
    oneLine(result.stderr);
  });

  it('log names DATABASE_URL when its PostgreSQL does not answer', async () => {
    const url = `postgres://postgres@127.0.0.1:${await freePort()}/nowhere`;
    const result = await runCliInProcess({ DATABASE_URL: url }, ['log', '--merchant', 'm_1']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('cannot use the PostgreSQL of DATABASE_URL');
    oneLine(result.stderr);
  });

  it('log names DATABASE_URL when it is not a PostgreSQL URL, as failed and waits do', async () => {
    for (const args of [['log', '--merchant', 'm_1'], ['waits', 'list']]) {
      const result = await runCliInProcess({ DATABASE_URL: 'db.internal:5432/webhooks' }, args);
      expect({ args, code: result.code, stderr: result.stderr }).toEqual({ args, code: 1, stderr: 'webhooks: Invalid configuration: DATABASE_URL: must be a postgres:// or postgresql:// URL\n' });
    }
  });

  it('says when a replay window holds more than one replay takes (100000): the rest are left for the next run', async () => {
    const merchant = testMerchant('m_big', 'https://hooks.example.com/big');
    await migrated.query(
      `INSERT INTO failed_webhooks (merchant_id, webhook_id, endpoint_id, failed_at, event, merchant_refs, reason, attempts)
       SELECT 'm_big', 'evt_big_' || g, $1, now() - g * interval '1 ms', 'payout', ARRAY['m_big' || chr(31) || 'PO-' || g], 'attempts-exhausted', 3
       FROM generate_series(1, 100001) AS g`,
      [merchant.endpoints[0]!.id],
    );
    await seedMerchants(migrated.url, [merchant]);
    const env = { DATABASE_URL: migrated.url };
    const result = await runCliInProcess(env, ['failed', 'replay', '--merchant', 'm_big', '--since', '1d', '--dry-run']);
    expect(result.code).toBe(0);
    expect(result.stdout.trimEnd().split('\n').at(-1)).toBe('dry run: would resend 100000 webhook(s) of merchant m_big; nothing was published');
    expect(result.stderr).toBe(
      'webhooks: more than 100000 unresolved failed webhooks of merchant m_big in the window: this replay takes the 100000 most recent; run it again for the rest (or narrow it with --since and --until)\n',
    );
  }, 60_000);

  it("says when an endpoint change is saved but its operational event cannot be published (no operational exchange: the programs' TOPOLOGY_PREFIX not exported)", async () => {
    const env = {
      DATABASE_URL: migrated.url,
      // The key the other cases' merchants in this database are sealed with: the directory opens every row.
      SECRETS_KEY: TEST_SECRETS_KEY,
      RABBITMQ_URL: brokerUrl(),
      // A prefix no program declared: its operational exchange does not exist.
      TOPOLOGY_PREFIX: uniquePrefix('cli-faults-none'),
    };
    const cli = (...args: string[]) => runCliInProcess(env, ['merchants', ...args]);
    expect((await cli('set', 'm_ann', '--public-key', 'pk_cli_faults_ann')).code).toBe(0);
    const added = await cli('endpoints', 'add', 'm_ann', '--url', 'https://hooks.example.com/ann');
    expect(added.code).toBe(0);
    const endpoint = /^(ep_\S+)/m.exec(added.stdout.split('\n')[1]!)![1]!;
    const disabled = await cli('endpoints', 'set', 'm_ann', endpoint, '--disable');
    // The write stands (every program reads the table); the event it announces went nowhere, and that is said.
    expect(disabled.code).toBe(0);
    expect(disabled.stdout).toContain('manual');
    expect(disabled.stderr).toMatch(/^webhooks: endpoint change saved, its operational event not published \(disabled\): .+\n$/);
  });

  it.each([
    ['999999999d', '--since'],
    ['1000000d', '--since'],
    ['0000-06-01', '--until'],
  ])('refuses %s for %s, a time outside the years 0001 to 9999, as a usage error (exit 2)', async (time, option) => {
    const result = await runCliInProcess({ DATABASE_URL: migrated.url }, ['failed', 'list', option, time]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`webhooks: ${option}: ${time} is outside the years 0001 to 9999`);
  });
});

describe('webhooks invalid requeue cut off midway', () => {
  const prefix = uniquePrefix('cli-faults');
  const names = topologyNames(prefix);
  let test: TestBroker;

  beforeAll(async () => {
    test = await TestBroker.open();
  });

  afterAll(async () => {
    await test?.deleteTopology(prefix);
    await test?.close();
  });

  it('says how many it had moved to dispatch when a move is refused, and leaves the rest in invalid', async () => {
    // dispatch takes one message and refuses the next (as a queue at its length limit does), so the
    // pass is cut after its first move.
    await test.channel.assertQueue(names.invalid, { durable: true });
    await test.channel.assertQueue(names.dispatch, { durable: true, arguments: { 'x-max-length': 1, 'x-overflow': 'reject-publish' } });
    const confirms = await test.connection.createConfirmChannel();
    for (const id of ['evt_a', 'evt_b', 'evt_c']) {
      confirms.sendToQueue(names.invalid, Buffer.from('{}'), { messageId: id, persistent: true, headers: { [HEADERS.invalidCode]: 'unknown-merchant' } });
    }
    await confirms.waitForConfirms();
    await confirms.close();
    const result = await runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix }, ['invalid', 'requeue', '--all']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`1 message(s) moved to ${names.dispatch} before it stopped; the rest are still in ${names.invalid}`);
    oneLine(result.stderr);
    expect(await test.messageCount(names.dispatch)).toBe(1);
    // The message whose copy was refused goes back when the CLI's channel closes: nothing lost.
    await waitFor('the two not moved back in invalid', async () => (await test.messageCount(names.invalid)) === 2);
  });
});

describe('webhooks failed resend cut off midway', () => {
  const prefix = uniquePrefix('cli-faults-resend');
  const names = topologyNames(prefix);
  let test: TestBroker;
  let db: TestDatabase;

  beforeAll(async () => {
    test = await TestBroker.open();
    db = await createTestDatabase('cli_faults_resend');
  });

  afterAll(async () => {
    await test?.deleteTopology(prefix);
    await test?.close();
    await db?.drop();
  });

  it('says how many it had resent when the broker refuses a copy (exit 1); a second run resends none of them again', async () => {
    const merchant = testMerchant('m_cut', 'https://hooks.example.com/cut');
    const content = JSON.stringify(sampleEvent('payout', 'm_cut'));
    await db.query(
      `INSERT INTO failed_webhooks (merchant_id, webhook_id, endpoint_id, failed_at, event, merchant_refs, reason, attempts, content)
       SELECT 'm_cut', 'evt_cut_' || g, $1, now() - (4 - g) * interval '1 s', 'payout', ARRAY['m_cut' || chr(31) || 'PO-CUT'], 'attempts-exhausted', 3, $2
       FROM generate_series(1, 3) AS g`,
      [merchant.endpoints[0]!.id, content],
    );
    // dispatch takes one copy and refuses the next (as a queue at its length limit does): the resend stops after its first.
    await test.channel.assertQueue(names.dispatch, { durable: true, arguments: { 'x-max-length': 1, 'x-overflow': 'reject-publish' } });
    await seedMerchants(db.url, [merchant]);
    const env = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: db.url };

    const result = await runCliInProcess(env, ['failed', 'resend', 'PO-CUT', '--merchant', 'm_cut']);

    expect({ code: result.code, stdout: result.stdout }).toEqual({ code: 1, stdout: '' });
    expect(result.stderr).toContain('1 webhook(s) of reference PO-CUT of merchant m_cut were resent before it stopped');
    oneLine(result.stderr);
    expect(await test.messageCount(names.dispatch)).toBe(1);
    const resent = await db.query<{ webhook_id: string }>('SELECT webhook_id FROM failed_webhooks WHERE resent_at IS NOT NULL');
    expect(resent.map((r) => r.webhook_id)).toEqual(['evt_cut_1']);

    // Room again: the copy never confirmed stays claimed for its lease; the one not tried goes, the first not again.
    await test.channel.purgeQueue(names.dispatch);
    const again = await runCliInProcess(env, ['failed', 'resend', 'PO-CUT', '--merchant', 'm_cut']);
    expect(again).toEqual({ code: 0, stdout: 'resent 1 webhook(s) for reference PO-CUT of merchant m_cut\n', stderr: '' });
    const now = await db.query<{ webhook_id: string }>('SELECT webhook_id FROM failed_webhooks WHERE resent_at IS NOT NULL ORDER BY webhook_id');
    expect(now.map((r) => r.webhook_id)).toEqual(['evt_cut_1', 'evt_cut_3']);
  });
});
