import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { DEV_MERCHANTS_FILE } from '../../libs/config/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { freePort } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const MAIN = resolve('dist/apps/main.js');

/**
 * Issue 33: `npm start` (development mode) keeps the delivery log in an embedded database inside
 * its own process; `webhooks log` beside it, as a newcomer types it (no DATABASE_URL, no
 * development flag), reads the log through the running API's admin routes.
 */
describe('webhooks log beside npm start', () => {
  const prefix = uniquePrefix('cli-log-dev');
  let port: number;
  let main: ChildProcess | undefined;
  let output = '';
  let cwd: string;

  beforeAll(async () => {
    port = await freePort();
    // Its own directory for the embedded database (.data/), with the repository's development
    // merchants pointing at a free port, where the demo merchant then listens: 4400, the file's,
    // is taken beside a running `npm start`.
    cwd = mkdtempSync(join(tmpdir(), 'cli-log-dev-'));
    mkdirSync(join(cwd, 'config'));
    const merchants = readFileSync(resolve(DEV_MERCHANTS_FILE), 'utf8');
    expect(merchants).toContain('http://127.0.0.1:4400/');
    writeFileSync(join(cwd, DEV_MERCHANTS_FILE), merchants.replaceAll('http://127.0.0.1:4400/', `http://127.0.0.1:${await freePort()}/`));
    main = spawn(process.execPath, [MAIN], {
      cwd,
      env: { PATH: process.env.PATH ?? '', RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, PORT: String(port), METRICS_PORT: String(await freePort()), WEBHOOKS_DEV: 'true' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    main.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    main.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    await waitFor('npm start ready', async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200, 60_000, 200).catch((err: Error) => {
      throw new Error(`${err.message}\n${output.slice(-3_000)}`);
    });
  }, 90_000);

  afterAll(async () => {
    if (main && main.exitCode === null) {
      main.kill('SIGTERM');
      await once(main, 'exit');
    }
    rmSync(cwd, { recursive: true, force: true });
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
  });

  it('lists the demo merchant\'s webhooks and shows one\'s timeline, read through the API', async () => {
    const published = await runCliInProcess({ RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix }, ['publish', '--sample', 'payout', '--merchant', 'm_demo']);
    expect(published.code).toBe(0);
    // As a newcomer types it beside npm start: only where the API is (this test's port; the README's is the default 8080).
    const env = { WEBHOOKS_API_URL: `http://127.0.0.1:${port}` };
    const listed = await waitFor('the webhook delivered in the log', async () => {
      const result = await runCliInProcess(env, ['log', '--merchant', 'm_demo', '--json']);
      const webhooks = result.code === 0 ? (JSON.parse(result.stdout) as Array<{ webhookId: string; status: string }>) : [];
      return webhooks.find((w) => w.status === 'delivered');
    }, 30_000, 500);
    const timeline = await runCliInProcess(env, ['log', '--merchant', 'm_demo', '--webhook-id', listed.webhookId]);
    expect(timeline.code).toBe(0);
    expect(timeline.stdout).toContain(listed.webhookId);
    expect(timeline.stdout).toMatch(/delivered\s+#1/);
    expect(timeline.stderr).toBe('');
  }, 60_000);

  it('shows the timelines of a reference with 20 webhooks, within the API\'s limits on a merchant\'s reads in flight', async () => {
    // As an upstream client without the typed publisher would, each confirmed.
    const test = await TestBroker.open();
    try {
      const confirms = await test.connection.createConfirmChannel();
      for (let i = 0; i < 20; i++) {
        const event = { merchantId: 'm_demo', event: 'payout', data: { reference: 'PO-MANY', amount: i, currency: 'NGN', status: 'successful' } };
        confirms.publish(`${prefix}.events`, 'payout', Buffer.from(JSON.stringify(event)), { messageId: `evt_many_${i}`, contentType: 'application/json', persistent: true });
      }
      await confirms.waitForConfirms();
      await confirms.close();
    } finally {
      await test.close();
    }
    const env = { WEBHOOKS_API_URL: `http://127.0.0.1:${port}` };
    // Polled with the list (one read each time): the merchant's reads per minute are limited too.
    await waitFor('20 delivered', async () => {
      const result = await runCliInProcess(env, ['log', '--merchant', 'm_demo', '--status', 'delivered', '--limit', '100', '--json']);
      // The demo merchant's two endpoints both take payouts: each webhook is a delivery on each.
      const many = result.code === 0 ? (JSON.parse(result.stdout) as Array<{ webhookId: string; endpointId: string; references: string[] }>).filter((w) => w.references.includes('PO-MANY')) : [];
      return many.length === 40 && new Set(many.map((w) => w.webhookId)).size === 20 && new Set(many.map((w) => w.endpointId)).size === 2;
    }, 30_000, 500);
    const result = await runCliInProcess(env, ['log', '--merchant', 'm_demo', '--reference', 'PO-MANY']);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    // A timeline per delivery: each of the 20 webhooks on each of the two endpoints.
    expect(result.stdout.match(/PO-MANY {2}first seen/g)).toHaveLength(40);
    expect(result.stdout.match(/ ep_demo_main\n/g)).toHaveLength(20);
    expect(result.stdout.match(/ ep_demo_payouts\n/g)).toHaveLength(20);
  }, 60_000);

  it('prints a portal link for the demo merchant that opens a session, as the README shows', async () => {
    const result = await runCliInProcess({}, ['portal', '--merchant', 'm_demo', '--api', `http://127.0.0.1:${port}`]);
    expect(result.code).toBe(0);
    const url = new URL(result.stdout.trim().split('\n').at(-1)!);
    expect(url.pathname).toBe('/portal/');
    const token = new URLSearchParams(url.hash.slice(1)).get('token');
    const session = await fetch(`http://127.0.0.1:${port}/portal/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }) });
    expect(session.status).toBe(201);
  });

  it('says what to set when neither DATABASE_URL nor an API is there', async () => {
    const result = await runCliInProcess({ WEBHOOKS_API_URL: `http://127.0.0.1:${await freePort()}` }, ['log', '--merchant', 'm_demo']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('DATABASE_URL is not set, and no API answers at');
  });
});
