import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import amqp from 'amqplib';
import pg from 'pg';
import { brokerUrl } from '../support/broker.js';
import { adminDatabaseUrl } from '../support/postgres.js';
import { localCtl } from '../support/rabbitmqctl.js';
import { freePort } from '../support/receiver.js';

/**
 * docs/production.md, "Install on Debian": the shell blocks marked `<!-- tested -->` run in order, in
 * one bash, against this machine's RabbitMQ and PostgreSQL, with the test's own directories, names
 * and ports in place of the guide's (the guide says which), and stand-ins for systemctl and runuser.
 * The schema is made by the guide's `webhooks migrate` before the programs start (they never make
 * it). Afterwards the deployment runs: the API's /readyz answers 200, and the guide's own last block
 * has sent a webhook with the CLI to a receiver that verified its signature.
 *
 * It runs beside the other files: the user, vhost, role and database the guide makes are its own
 * (named after this run, deleted after); nothing another file uses is stopped, blocked or changed.
 */
const REPO = fileURLToPath(new URL('../../', import.meta.url));
const GUIDE = join(REPO, 'docs/production.md');
const UNITS = join(REPO, 'deploy/systemd');
const run = promisify(execFile);

/** The guide's shell blocks, each with its marker (`tested`, `not tested`, or none). */
export function shellBlocks(markdown: string): Array<{ marker?: string; code: string }> {
  return [...markdown.matchAll(/(?:<!-- (tested|not tested) -->\n)?```sh\n([\s\S]*?)```/g)].map((m) => ({ marker: m[1], code: m[2]! }));
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe('the production guide, followed on this machine', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'production-guide-'));
  const name = `h21_test_prod_${randomBytes(4).toString('hex')}`;
  const state = join(tmp, 'state');
  const ctl = localCtl();
  let ports: Record<string, number>;
  let substitutions: Array<[string, string]>;

  beforeAll(async () => {
    ports = {};
    for (const port of ['8080', '8081', '9464', '9465', '9466', '4400']) ports[port] = await freePort();
    substitutions = [
      [escape('/etc/systemd/system'), join(tmp, 'systemd')],
      [escape('/etc/nucleus-webhooks'), join(tmp, 'etc')],
      [escape('/usr/local/bin'), join(tmp, 'bin')],
      [escape('/opt/nucleus-webhooks'), REPO.replace(/\/$/, '')],
      ['nucleus_webhooks', name],
      ...Object.entries(ports).map(([from, to]): [string, string] => [`\\b${from}\\b`, String(to)]),
    ];
    for (const dir of ['systemd', 'bin', 'fakebin', 'state']) mkdirSync(join(tmp, dir));
    writeFileSync(join(tmp, 'fakebin/systemctl'), `#!/bin/sh\nexec node ${join(REPO, 'test/support/fake-systemctl.mjs')} "$@"\n`);
    // runuser -u <user> -- <command>: the tests reach PostgreSQL over TCP as PGUSER instead.
    writeFileSync(join(tmp, 'fakebin/runuser'), '#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in -u) shift 2;; --) shift; break;; *) break;; esac; done\nexec "$@"\n');
    for (const tool of ['systemctl', 'runuser']) chmodSync(join(tmp, 'fakebin', tool), 0o755);
  });

  afterAll(async () => {
    // Only what the guide's blocks started here, by the pids the stand-in kept.
    for (const file of existsSync(state) ? readdirSync(state).filter((f) => f.endsWith('.pid')) : []) {
      const pid = Number(readFileSync(join(state, file), 'utf8'));
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await ctl?.(['delete_vhost', name]).catch(() => {});
    await ctl?.(['delete_user', name]).catch(() => {});
    await ctl?.(['delete_user', `${name}_upstream`]).catch(() => {});
    const admin = new pg.Client({ connectionString: adminDatabaseUrl() });
    await admin.connect();
    try {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.query(`DROP ROLE IF EXISTS ${name}`);
    } finally {
      await admin.end();
    }
    rmSync(tmp, { recursive: true, force: true });
  });

  it('marks every shell block of the install as tested or not tested', () => {
    const install = readFileSync(GUIDE, 'utf8').split('## Install on Debian')[1]!.split('\n## ')[0]!;
    const blocks = shellBlocks(install);
    expect(blocks.filter((b) => b.marker === undefined)).toEqual([]);
    expect(blocks.filter((b) => b.marker === 'tested').length).toBeGreaterThanOrEqual(6);
  });

  it('ships unit files that systemd accepts', async () => {
    const units = readdirSync(UNITS).filter((f) => f.endsWith('.service'));
    expect(units.sort()).toEqual(['nucleus-webhooks-api.service', 'nucleus-webhooks-dispatcher.service', 'nucleus-webhooks-recorder.service']);
    if (!existsSync('/usr/bin/systemd-analyze')) return;
    const { stdout, stderr } = await run('systemd-analyze', ['verify', ...units.map((u) => join(UNITS, u))], { timeout: 60_000 });
    expect(`${stdout}${stderr}`.split('\n').filter((line) => line.includes('nucleus-webhooks'))).toEqual([]);
  });

  /** The guide's upstream user: a publish to the events exchange is confirmed, one straight to dispatch refused. */
  async function expectUpstreamPublishesToEventsOnly(): Promise<void> {
    const password = randomBytes(12).toString('hex');
    await ctl!(['change_password', `${name}_upstream`, password]);
    const url = new URL(brokerUrl());
    Object.assign(url, { username: `${name}_upstream`, password, pathname: `/${name}` });
    const connection = await amqp.connect(url.toString());
    try {
      const channel = await connection.createConfirmChannel();
      channel.publish('webhooks.events', 'payout', Buffer.from('{}'));
      await channel.waitForConfirms();
      const refused = await connection.createConfirmChannel();
      const closed = new Promise<string>((resolve) => refused.on('error', (err: Error) => resolve(err.message)));
      refused.sendToQueue('webhooks.dispatch', Buffer.from('{}'));
      // A broken grant shows as a confirm, not as a test waiting for a close that never comes.
      expect(await Promise.race([closed, refused.waitForConfirms().then(() => 'confirmed', () => closed)])).toMatch(/ACCESS_REFUSED/);
    } finally {
      await connection.close().catch(() => {});
    }
  }

  it('runs the tested blocks to a running deployment that delivers a verified webhook', async () => {
    expect(ctl).toBeDefined(); // the guide's RabbitMQ user and vhost are made with rabbitmqctl
    const guide = readFileSync(GUIDE, 'utf8');
    const apply = (text: string) => substitutions.reduce((out, [from, to]) => out.replace(new RegExp(from, 'g'), to), text);
    const script = ['set -euo pipefail', ...shellBlocks(guide).filter((b) => b.marker === 'tested').map((b) => apply(b.code))].join('\n');
    const bash = spawn('bash', ['-c', script], {
      cwd: tmp,
      env: {
        PATH: `${join(tmp, 'fakebin')}:${join(tmp, 'bin')}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
        HOME: process.env.HOME ?? '/root',
        PGHOST: new URL(adminDatabaseUrl()).hostname,
        PGPORT: new URL(adminDatabaseUrl()).port || '5432',
        PGUSER: decodeURIComponent(new URL(adminDatabaseUrl()).username) || 'postgres',
        FAKE_SYSTEMD_UNITS: join(tmp, 'systemd'),
        FAKE_SYSTEMD_STATE: state,
        FAKE_SYSTEMD_SUBST: JSON.stringify(substitutions),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    bash.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    bash.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => bash.on('close', resolve));
    const logs = readdirSync(state).filter((f) => f.endsWith('.log')).map((f) => `--- ${f}\n${readFileSync(join(state, f), 'utf8').slice(-3000)}`).join('\n');
    if (code !== 0) throw new Error(`the guide's tested blocks exited ${code}:\n${output.split('\n').slice(-15).join('\n')}\n${logs}`);

    const ready = await fetch(`http://127.0.0.1:${ports['8080']}/readyz`);
    expect(ready.status).toBe(200);
    // The admin API is on ADMIN_PORT only, as the env file says.
    expect((await fetch(`http://127.0.0.1:${ports['8080']}/admin/merchants/m_x`)).status).toBe(404);
    expect((await fetch(`http://127.0.0.1:${ports['8081']}/admin/merchants/m_x`)).status).toBe(401);
    expect(output).toContain('m_smoke_check');
    await expectUpstreamPublishesToEventsOnly();
    // The guide's migrate made the schema, before any program started.
    expect(output).toContain('applied 0001_initial.sql');
    // As the database's owner (the programs' role), so that the programs own what it made.
    const url = new URL(adminDatabaseUrl());
    url.pathname = `/${name}`;
    const guideDb = new pg.Client({ connectionString: url.toString() });
    await guideDb.connect();
    try {
      const owners = await guideDb.query<{ owner: string }>(`SELECT DISTINCT tableowner AS owner FROM pg_tables WHERE schemaname = 'public'`);
      expect(owners.rows).toEqual([{ owner: name }]);
    } finally {
      await guideDb.end();
    }
  }, 300_000);
});
