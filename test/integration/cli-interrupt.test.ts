/**
 * Ctrl-C (SIGINT) on the built CLI while it moves things one at a time: `failed replay`,
 * `invalid requeue` and `invalid list` stop after the one in hand, print what they did and exit 130,
 * and what they say matches what the queues and the failure index hold (nothing lost, nothing moved
 * twice, nothing returned to count towards a quorum queue's delivery-limit).
 */
import { resolve } from 'node:path';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants } from '../support/merchant-rows.js';
import { FrozenProxy } from '../support/frozen-proxy.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { startProgram } from '../support/process.js';
import { waitFor } from '../support/wait.js';

const CLI = resolve('dist/apps/cli/main.js');

describe('webhooks failed replay and invalid requeue interrupted with Ctrl-C', () => {
  const prefix = uniquePrefix('cli-interrupt');
  const names = topologyNames(prefix);
  let test: TestBroker;
  let db: TestDatabase;

  beforeAll(async () => {
    test = await TestBroker.open();
    db = await createTestDatabase('cli_interrupt');
  });

  afterAll(async () => {
    await test?.deleteTopology(prefix);
    await test?.close();
    await db?.drop();
  });

  beforeEach(async () => {
    await test.channel.assertQueue(names.dispatch, { durable: true });
    await test.channel.purgeQueue(names.dispatch);
  });

  it('failed replay stops after the webhook in hand, says what it resent and what it did not try, and exits 130', async () => {
    const merchant = testMerchant('m_int', 'https://hooks.example.com/int');
    await db.query(
      `INSERT INTO failed_webhooks (merchant_id, webhook_id, endpoint_id, failed_at, event, merchant_refs, reason, attempts, content)
       SELECT 'm_int', 'evt_int_' || g, $1, now() - g * interval '1 s', 'payout', ARRAY['m_int' || chr(31) || 'PO-INT-' || g], 'attempts-exhausted', 3, $2
       FROM generate_series(1, 20) AS g`,
      [merchant.endpoints[0]!.id, JSON.stringify(sampleEvent('payout', 'm_int'))],
    );
    await seedMerchants(db.url, [merchant]);
    const env = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, DATABASE_URL: db.url };
    // 5 a second: the 20 would take 4 s; Ctrl-C once the progress says 2 went.
    const replay = startProgram(CLI, env, ['failed', 'replay', '--merchant', 'm_int', '--since', '1h', '--rate', '5']);
    await waitFor('2 of 20 replayed', () => replay.output.stderr.includes('(2/20)'), 15_000, 5);
    replay.child.kill('SIGINT');
    const result = await replay.finished;

    expect(result.code).toBe(130);
    const said = /^replay of merchant m_int interrupted: resent (\d+), skipped 0, errors 0; (\d+) not tried: run it again for them$/.exec(result.stdout.trim());
    expect({ stdout: result.stdout, matched: said !== null }).toEqual({ stdout: result.stdout, matched: true });
    const [resent, notTried] = [Number(said![1]), Number(said![2])];
    expect(resent + notTried).toBe(20);
    expect(notTried).toBeGreaterThan(0);
    expect(await test.messageCount(names.dispatch)).toBe(resent);
    expect(await db.query('SELECT count(*)::int AS n FROM failed_webhooks WHERE resent_at IS NOT NULL')).toEqual([{ n: resent }]);
    expect(await db.query('SELECT count(*)::int AS n FROM failed_webhooks WHERE claim_id IS NOT NULL AND resent_at IS NULL')).toEqual([{ n: 0 }]);
  }, 30_000);

  it('invalid requeue stops after the message in hand, says how many it moved, and leaves the rest parked, each once', async () => {
    const total = 3_000;
    await test.channel.assertQueue(names.invalid, { durable: true });
    const confirms = await test.connection.createConfirmChannel();
    for (let i = 0; i < total; i++) {
      confirms.sendToQueue(names.invalid, Buffer.from('{}'), { messageId: `evt_park_${i}`, persistent: true, headers: { [HEADERS.invalidCode]: 'unknown-merchant' } });
    }
    await confirms.waitForConfirms();
    await confirms.close();
    const requeue = startProgram(CLI, { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix }, ['invalid', 'requeue', '--all']);
    await waitFor('the first moves', async () => (await test.messageCount(names.dispatch)) > 0, 15_000, 5);
    requeue.child.kill('SIGINT');
    const result = await requeue.finished;

    expect(result.code).toBe(130);
    const said = new RegExp(`^interrupted: moved (\\d+) message\\(s\\) to ${names.dispatch}; the rest are still in ${names.invalid}: run it again for them$`).exec(result.stdout.trim());
    expect({ stdout: result.stdout, matched: said !== null }).toEqual({ stdout: result.stdout, matched: true });
    const moved = Number(said![1]);
    expect(moved).toBeLessThan(total);
    // Nothing held when it exited: each message in one queue, once.
    expect(await test.messageCount(names.dispatch)).toBe(moved);
    expect(await test.messageCount(names.invalid)).toBe(total - moved);
    const ids = new Set([...(await test.drain(names.dispatch, moved)), ...(await test.drain(names.invalid, total - moved))].map((m) => m.properties.messageId as string));
    expect(ids.size).toBe(total);
  }, 60_000);
});

describe('webhooks invalid list interrupted with Ctrl-C', () => {
  const prefix = uniquePrefix('cli-interrupt-list');
  const names = topologyNames(prefix);
  let test: TestBroker;

  beforeAll(async () => {
    test = await TestBroker.open();
  });

  afterAll(async () => {
    await test?.deleteTopology(prefix);
    await test?.close();
  });

  it('stops after the message in hand and exits 130: nothing returned (counted towards delivery-limit), each message in invalid once', async () => {
    const total = 3_000;
    // A quorum queue, as the topology declares invalid: a message returned is counted (x-delivery-count).
    await test.channel.assertQueue(names.invalid, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    const confirms = await test.connection.createConfirmChannel();
    for (let i = 0; i < total; i++) {
      confirms.sendToQueue(names.invalid, Buffer.alloc(300, 'x'), { messageId: `evt_list_${i}`, persistent: true, headers: { [HEADERS.invalidCode]: 'unknown-merchant' } });
    }
    await confirms.waitForConfirms();
    await confirms.close();
    // Through a proxy that counts what the broker sends: a list prints nothing until its pass ends.
    const proxy = await FrozenProxy.start(brokerUrl());
    try {
      const list = startProgram(CLI, { RABBITMQ_URL: proxy.url, TOPOLOGY_PREFIX: prefix }, ['invalid', 'list', '--limit', '3']);
      await waitFor('100 messages read', () => proxy.received > 100 * 300, 15_000, 5);
      list.child.kill('SIGINT');
      const result = await list.finished;

      const left = await test.drain(names.invalid, total);
      const returned = left.filter((m) => m.fields.redelivered || Number(m.properties.headers?.['x-delivery-count'] ?? 0) > 0).map((m) => m.properties.messageId as string);
      expect({ count: left.length, distinct: new Set(left.map((m) => m.properties.messageId)).size, returned }).toEqual({ count: total, distinct: total, returned: [] });
      expect(result.code).toBe(130);
      const said = new RegExp(`^interrupted: read (\\d+) message\\(s\\) of ${names.invalid}, now behind the ones it did not reach: run it again for the whole list$`).exec(result.stderr.trim());
      expect({ stderr: result.stderr, matched: said !== null }).toEqual({ stderr: result.stderr, matched: true });
      expect(Number(said![1])).toBeLessThan(total);
      expect(result.stdout).toContain('evt_list_0');
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it('still prints a JSON array with --json when stopped before anything matched: [] for scripts', async () => {
    const total = 3_000;
    await test.channel.assertQueue(names.invalid, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    const confirms = await test.connection.createConfirmChannel();
    for (let i = 0; i < total; i++) {
      confirms.sendToQueue(names.invalid, Buffer.alloc(300, 'x'), { messageId: `evt_json_${i}`, persistent: true, headers: { [HEADERS.invalidCode]: 'unknown-merchant' } });
    }
    await confirms.waitForConfirms();
    await confirms.close();
    const proxy = await FrozenProxy.start(brokerUrl());
    try {
      const list = startProgram(CLI, { RABBITMQ_URL: proxy.url, TOPOLOGY_PREFIX: prefix }, ['invalid', 'list', '--code', 'too-large', '--json']);
      await waitFor('100 messages read', () => proxy.received > 100 * 300, 15_000, 5);
      list.child.kill('SIGINT');
      const result = await list.finished;

      expect(result.code).toBe(130);
      expect(result.stdout).toBe('[]\n');
      expect(result.stderr).toMatch(/^interrupted: read \d+ message\(s\)/);
    } finally {
      await proxy.close();
      await test.drain(names.invalid, total);
    }
  }, 60_000);
});
