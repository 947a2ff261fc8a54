import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jwtVerify } from 'jose';
import { ADMIN_SCOPE } from '../../apps/api/auth.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { runProgram } from '../support/process.js';

const CLI = 'dist/apps/cli/main.js';

describe('webhooks publish', () => {
  const prefix = uniquePrefix('cli');
  let test: TestBroker;
  const env = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix };

  beforeAll(async () => {
    test = await TestBroker.open();
  });

  afterAll(async () => {
    await test.deleteTopology(prefix);
    await test.close();
  });

  it('publishes a sample of each event to the events exchange with its routing key and an event id', async () => {
    const result = await runCliInProcess(env, ['publish', '--sample', 'all', '--merchant', 'm_demo']);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const lines = result.stdout.trim().split('\n');
    expect(lines.map((l) => l.split(' ')[1])).toEqual(['charge.completed', 'payout', 'refund.completed']);

    const messages = await test.drain(`${prefix}.dispatch`, 3);
    expect(messages.map((m) => m.fields.routingKey)).toEqual(['charge.completed', 'payout', 'refund.completed']);
    for (const [i, m] of messages.entries()) {
      expect(m.fields.exchange).toBe(`${prefix}.events`);
      expect(m.properties.messageId).toBe(lines[i]!.split(' ')[2]);
      expect(m.properties.contentType).toBe('application/json');
      expect(m.properties.deliveryMode).toBe(2);
      expect(JSON.parse(m.content.toString()).merchantId).toBe('m_demo');
    }
  });

  it('declares only the intake (events and dispatch), so it never clashes with the programs\' queues', async () => {
    const result = await runCliInProcess({ ...env, RETRY_SCHEDULE: '7s' }, ['publish', '--sample', 'payout', '--merchant', 'm']);
    expect(result.code).toBe(0);
    await test.drain(`${prefix}.dispatch`, 1);
    const ch = await test.connection.createChannel();
    ch.on('error', () => {});
    await expect(ch.checkQueue(`${prefix}.invalid`)).rejects.toMatchObject({ code: 404 });
  });

  it('publishes an event from a file with the given message id, body unchanged', async () => {
    const file = join(tmpdir(), `event-${process.pid}.json`);
    const event = sampleEvent('payout', 'm_file');
    writeFileSync(file, JSON.stringify(event));
    const result = await runCliInProcess(env, ['publish', '--file', file, '--message-id', 'evt_from_file']);
    expect(result.code).toBe(0);
    const [message] = await test.drain(`${prefix}.dispatch`, 1);
    expect(message!.properties.messageId).toBe('evt_from_file');
    expect(JSON.parse(message!.content.toString())).toEqual(event);
  });

  it.each([
    [['publish', '--sample', 'charge.created', '--merchant', 'm'], '--sample takes one of'],
    [['publish', '--sample', 'payout'], '--sample needs --merchant'],
    // Refused before the broker is opened, in one line, as the dispatcher would park it (not a schema dump, exit 1).
    [['publish', '--sample', 'payout', '--merchant', 'm'.repeat(201)], '--merchant must be 1 to 200 characters without control characters'],
    [['publish', '--sample', 'payout', '--merchant', 'm\t1'], '--merchant must be 1 to 200 characters without control characters'],
    [['publish'], 'publish needs --sample'],
    [['unpublish'], "unknown command 'unpublish'\n(Did you mean publish?)"],
    [['publish', '--bogus'], "unknown option '--bogus'"],
    [['publish', '--mesage-id', 'x'], "unknown option '--mesage-id'\n(Did you mean --message-id?)"],
    [['token', '--merchnt', 'm'], "unknown option '--merchnt'\n(Did you mean --merchant?)"],
  ])('exits 2 with a usage message for %j', async (args, message) => {
    const result = await runCliInProcess(env, args);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(message);
    expect(result.stderr).toContain('Usage: webhooks');
  });

  /** Writes an event to a file of its own and publishes it with the CLI. */
  async function publishFile(event: unknown, ...args: string[]) {
    const file = join(tmpdir(), `event-${process.pid}-${Math.random().toString(36).slice(2)}.json`);
    writeFileSync(file, JSON.stringify(event));
    return runCliInProcess(env, ['publish', '--file', file, ...args]);
  }

  it.each([
    ['a space', 'evt 123'],
    ['a non-ASCII character', 'evt_é'],
    ['more than 200 characters', `evt_${'x'.repeat(200)}`],
  ])('refuses a --message-id with %s, as the dispatcher would park it, and publishes nothing', async (_what, messageId) => {
    const result = await publishFile(sampleEvent('payout', 'm_demo'), '--message-id', messageId);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--message-id must be printable ASCII without spaces, at most 200 characters');
    expect(result.stdout).not.toContain('published');
    expect(await test.messageCount(`${prefix}.dispatch`)).toBe(0);
  });

  it('refuses a reference with spaces at either end, which a resend by the trimmed reference would never find', async () => {
    const event = sampleEvent('payout', 'm_demo');
    const result = await publishFile({ ...event, data: { ...event.data, reference: ' PO-2026-0042 ' } });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('data.reference " PO-2026-0042 " has spaces at its start or end; publish it trimmed');
    expect(result.stdout).not.toContain('published');
  });

  it('refuses an event without its reference, as the dispatcher would park it as missing-reference', async () => {
    const event = sampleEvent('refund.completed', 'm_demo');
    const result = await publishFile({ ...event, data: { amount: 1 } });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('a refund.completed event needs data.refundRef or data.tnxRef');
  });

  it.each([
    ['publish', 'Usage: webhooks publish'],
    ['token', 'Usage: webhooks token'],
  ])('prints the help of %s itself on --help, not the general usage', async (command, usage) => {
    const result = await runCliInProcess({}, [command, '--help']);
    expect(result.code).toBe(0);
    expect(result.stdout.startsWith(usage)).toBe(true);
  });

  it.each([
    [['help'], 'Usage: webhooks [options] [command]'],
    [['help', 'failed'], 'Usage: webhooks failed <list|resend|replay>'],
    [['failed', 'help', 'replay'], 'Usage: webhooks failed replay'],
  ])('prints the help %j asks for on stdout and exits 0, as --help does (help [command] is in every listing)', async (args, usage) => {
    const result = await runCliInProcess({}, args);
    expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
    expect(result.stdout.startsWith(usage)).toBe(true);
  });

  it('says in publish --help that it declares events and dispatch, and that TOPOLOGY_PREFIX must be the programs\'', async () => {
    const { stdout } = await runCliInProcess({}, ['publish', '--help']);
    expect(stdout).toContain('It declares <TOPOLOGY_PREFIX>.events and <TOPOLOGY_PREFIX>.dispatch');
    expect(stdout).toContain('Export the TOPOLOGY_PREFIX the programs run with');
  });

  it('exits 2 with the reason when the file is not a valid event', async () => {
    const file = join(tmpdir(), `bad-event-${process.pid}.json`);
    writeFileSync(file, JSON.stringify({ merchantId: 'm', event: 'nope', data: {} }));
    const result = await runCliInProcess(env, ['publish', '--file', file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('not a valid event');
  });

  it('mints an HS256 access token for a merchant that expires after --ttl', async () => {
    const secret = 'cli-test-secret-long-enough-for-hs256-000';
    const result = await runCliInProcess({ ...env, AUTH_JWT_SECRET: secret }, ['token', '--merchant', 'm_demo', '--ttl', '10m']);
    expect(result.code).toBe(0);
    const { payload, protectedHeader } = await jwtVerify(result.stdout.trim(), new TextEncoder().encode(secret));
    expect(protectedHeader.alg).toBe('HS256');
    expect(payload.sub).toBe('m_demo');
    expect(payload.exp! - payload.iat!).toBe(600);
  });

  it('mints an admin token (scope webhooks:admin) for the admin API with --admin, in development mode without a secret', async () => {
    const result = await runCliInProcess({ ...env, WEBHOOKS_DEV: 'true' }, ['token', '--admin']);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const { DEV_JWT_SECRET } = await import('../../libs/config/index.js');
    const { payload } = await jwtVerify(result.stdout.trim(), new TextEncoder().encode(DEV_JWT_SECRET));
    expect(String(payload.scope).split(' ')).toContain(ADMIN_SCOPE);
  });

  it('puts --scope values and the configured issuer and audience in the token, as the API checks them', async () => {
    const secret = 'cli-test-secret-long-enough-for-hs256-000';
    const result = await runCliInProcess(
      { ...env, AUTH_JWT_SECRET: secret, AUTH_JWT_ISSUER: 'https://auth.example', AUTH_JWT_AUDIENCE: 'webhooks' },
      ['token', '--merchant', 'm_1', '--scope', 'a:read,b:write'],
    );
    expect(result.code).toBe(0);
    const { payload } = await jwtVerify(result.stdout.trim(), new TextEncoder().encode(secret), { issuer: 'https://auth.example', audience: 'webhooks' });
    expect(payload).toMatchObject({ sub: 'm_1', scope: 'a:read b:write' });
  });

  it('says a token needs --merchant or --admin', async () => {
    const result = await runCliInProcess({ ...env, WEBHOOKS_DEV: 'true' }, ['token']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('token needs --merchant <id> (resend API) or --admin (admin API)');
  });

  it('refuses a portal link lifetime outside the 1s to 7d its help gives as a usage error (exit 2), before asking any API', async () => {
    for (const lifetime of ['8d', '0s', '200h']) {
      const result = await runCliInProcess({ ...env, WEBHOOKS_DEV: 'true' }, ['portal', '--merchant', 'm_1', '--expires-in', lifetime, '--api', 'http://127.0.0.1:9']);
      expect({ lifetime, code: result.code, stderr: result.stderr }).toEqual({ lifetime, code: 2, stderr: expect.stringContaining('--expires-in takes a duration from 1s to 7d') });
    }
  });

  it("never prints the password of the admin API's URL (WEBHOOKS_API_URL, --api) when the API cannot be used", async () => {
    const url = 'http://operator:pw-9f3a7c@127.0.0.1:9';
    const runs = [
      await runCliInProcess({ ...env, WEBHOOKS_API_URL: url }, ['portal', '--merchant', 'm_1']),
      await runCliInProcess(env, ['portal', '--merchant', 'm_1', '--api', url]),
      await runCliInProcess({ ...env, WEBHOOKS_API_URL: url }, ['log', '--merchant', 'm_1']),
    ];
    for (const result of runs) {
      expect(result.code).not.toBe(0);
      expect(result.stderr).toContain('127.0.0.1:9');
      expect(result.stderr).not.toContain('pw-9f3a7c');
    }
  });
});

describe('the built `webhooks` (dist/apps/cli/main.js)', () => {
  const prefix = uniquePrefix('cli-pipe');

  afterAll(async () => {
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
  });

  it('finishes what it was asked, without a stack trace, when the reader of its output goes away (`| head`)', async () => {
    const child = spawn(process.execPath, [CLI, 'publish', '--sample', 'payout', '--merchant', 'm_pipe', '--count', '20'], {
      env: { PATH: process.env.PATH ?? '', RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // Closed before the CLI has loaded: each line it prints meets a closed pipe (EPIPE).
    child.stdout!.destroy();
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const [code] = (await once(child, 'exit')) as [number | null];
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    const test = await TestBroker.open();
    try {
      expect(await test.messageCount(`${prefix}.dispatch`)).toBe(20);
    } finally {
      await test.close();
    }
  });

  // The CLI's tests run its command lines in their own process (test/support/cli.ts: runCli, which
  // main.ts runs): this is the binary around it, exiting with runCli's code, its output flushed.
  it('exits 0 with the help on stdout, 2 with a usage error on stderr, 1 with a failure on stderr', async () => {
    const help = await runProgram(CLI, {}, ['publish', '--help']);
    expect(help).toMatchObject({ code: 0, stderr: '' });
    expect(help.stdout.startsWith('Usage: webhooks publish')).toBe(true);
    expect(help.stdout).toContain('Export the TOPOLOGY_PREFIX the programs run with');
    const usage = await runProgram(CLI, {}, ['publish', '--bogus']);
    expect(usage).toMatchObject({ code: 2, stdout: '' });
    expect(usage.stderr).toContain("webhooks: unknown option '--bogus'");
    const absent = uniquePrefix('cli-absent');
    const failed = await runProgram(CLI, { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: absent }, ['invalid', 'list']);
    expect(failed).toMatchObject({ code: 1, stdout: '' });
    expect(failed.stderr).toBe(`webhooks: ${absent}.invalid does not exist on this broker: no dispatcher or API has declared the topology of TOPOLOGY_PREFIX=${absent} here\n`);
  });
});
