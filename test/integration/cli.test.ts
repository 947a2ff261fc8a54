import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jwtVerify } from 'jose';
import { sampleEvent } from '../../libs/contracts/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
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
    await test.deleteTopology(prefix, 0);
    await test.close();
  });

  it('publishes a sample of each event to the events exchange with its routing key and an event id', async () => {
    const result = await runProgram(CLI, env, ['publish', '--sample', 'all', '--merchant', 'm_demo']);
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

  it('declares only the intake (events and dispatch), so it never clashes with the retry schedule', async () => {
    const result = await runProgram(CLI, { ...env, RETRY_SCHEDULE: '7s' }, ['publish', '--sample', 'payout', '--merchant', 'm']);
    expect(result.code).toBe(0);
    await test.drain(`${prefix}.dispatch`, 1);
    const ch = await test.connection.createChannel();
    ch.on('error', () => {});
    await expect(ch.checkQueue(`${prefix}.retry.0`)).rejects.toMatchObject({ code: 404 });
  });

  it('publishes an event from a file with the given message id, body unchanged', async () => {
    const file = join(tmpdir(), `event-${process.pid}.json`);
    const event = sampleEvent('payout', 'm_file');
    writeFileSync(file, JSON.stringify(event));
    const result = await runProgram(CLI, env, ['publish', '--file', file, '--message-id', 'evt_from_file']);
    expect(result.code).toBe(0);
    const [message] = await test.drain(`${prefix}.dispatch`, 1);
    expect(message!.properties.messageId).toBe('evt_from_file');
    expect(JSON.parse(message!.content.toString())).toEqual(event);
  });

  it.each([
    [['publish', '--sample', 'charge.created', '--merchant', 'm'], '--sample takes one of'],
    [['publish', '--sample', 'payout'], '--sample needs --merchant'],
    [['publish'], 'publish needs --sample'],
    [['unpublish'], 'unknown command unpublish'],
    [['publish', '--bogus'], "Unknown option '--bogus'"],
  ])('exits 2 with a usage message for %j', async (args, message) => {
    const result = await runProgram(CLI, env, args);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(message);
    expect(result.stderr).toContain('Usage: webhooks');
  });

  it('exits 2 with the reason when the file is not a valid event', async () => {
    const file = join(tmpdir(), `bad-event-${process.pid}.json`);
    writeFileSync(file, JSON.stringify({ merchantId: 'm', event: 'nope', data: {} }));
    const result = await runProgram(CLI, env, ['publish', '--file', file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('not a valid event');
  });

  it('mints an HS256 access token for a merchant that expires after --ttl', async () => {
    const secret = 'cli-test-secret-long-enough-for-hs256-000';
    const result = await runProgram(CLI, { ...env, AUTH_JWT_SECRET: secret }, ['token', '--merchant', 'm_demo', '--ttl', '10m']);
    expect(result.code).toBe(0);
    const { payload, protectedHeader } = await jwtVerify(result.stdout.trim(), new TextEncoder().encode(secret));
    expect(protectedHeader.alg).toBe('HS256');
    expect(payload.sub).toBe('m_demo');
    expect(payload.exp! - payload.iat!).toBe(600);
  });
});
