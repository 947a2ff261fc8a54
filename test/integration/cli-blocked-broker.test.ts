/**
 * The CLI on a broker that takes publishes but never confirms them, as one whose memory or disk
 * alarm blocks its publishers (a proxy drops the confirms, so the shared broker is never blocked):
 * each command that publishes gives up after its deadline and says what may have happened, instead
 * of waiting forever.
 */
import { CLI_BROKER_DEADLINE_MS } from '../../apps/cli/broker.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { declareIntake, topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { FrozenProxy } from '../support/frozen-proxy.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants } from '../support/merchant-rows.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

/** One line on stderr, no stack trace. */
function oneLine(stderr: string): void {
  expect(stderr).not.toMatch(/TypeError|\n\s+at /);
  expect(stderr.trimEnd().split('\n')).toHaveLength(1);
}

describe('the CLI on a broker that takes publishes but never confirms them (a memory or disk alarm blocks publishers)', () => {
  const prefix = uniquePrefix('cli-faults-blocked');
  const names = topologyNames(prefix);
  let test: TestBroker;
  let proxy: FrozenProxy;
  let db: TestDatabase;

  beforeAll(async () => {
    test = await TestBroker.open();
    db = await createTestDatabase('cli_blocked');
    proxy = await FrozenProxy.start(brokerUrl());
    proxy.dropConfirms();
    // invalid as the programs would have it; publish (the first test) declares events and dispatch.
    await test.channel.assertQueue(names.invalid, { durable: true });
    // dispatch as publish declares it (the resends' queue), whichever test runs first.
    await declareIntake(() => test.connection.createChannel(), prefix);
  });

  afterAll(async () => {
    await proxy?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
    await db?.drop();
  });

  /** The command's end, or a failure naming the hang: a CLI waiting for a confirm waits forever. */
  async function endsWithin(ms: number, args: string[], env: Record<string, string> = {}) {
    let timer: NodeJS.Timeout | undefined;
    const hung = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`webhooks ${args.join(' ')} still waiting after ${ms} ms`)), ms)));
    try {
      return await Promise.race([runCliInProcess({ RABBITMQ_URL: proxy.url, TOPOLOGY_PREFIX: prefix, ...env }, args), hung]);
    } finally {
      clearTimeout(timer);
    }
  }

  it('publish gives up after its deadline, naming the event whose outcome is unknown', async () => {
    const result = await endsWithin(20_000, ['publish', '--sample', 'payout', '--merchant', 'm_blocked', '--message-id', 'evt_blocked_publish']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`RabbitMQ did not confirm evt_blocked_publish within ${CLI_BROKER_DEADLINE_MS} ms`);
    oneLine(result.stderr);
  }, 30_000);

  it('invalid requeue gives up after its deadline, saying the message may be in both queues', async () => {
    const confirms = await test.connection.createConfirmChannel();
    confirms.sendToQueue(names.invalid, Buffer.from('{}'), { messageId: 'evt_blocked', persistent: true, headers: { [HEADERS.invalidCode]: 'unknown-merchant' } });
    await confirms.waitForConfirms();
    await confirms.close();
    const result = await endsWithin(20_000, ['invalid', 'requeue', '--all']);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`RabbitMQ did not confirm a copy within ${CLI_BROKER_DEADLINE_MS} ms`);
    oneLine(result.stderr);
  }, 30_000);

  /** `count` unresolved failures of merchant `id` (references PO-<id>-1…), on its one enabled endpoint. */
  async function failuresOf(id: string, count: number): Promise<Record<string, string>> {
    const merchant = testMerchant(id, 'https://hooks.example.com/blocked');
    await seedMerchants(db.url, [merchant]);
    await db.query(
      `INSERT INTO failed_webhooks (merchant_id, webhook_id, endpoint_id, failed_at, event, merchant_refs, reason, attempts, content)
       SELECT $3, 'evt_' || $3 || '_' || g, $1, now() - g * interval '1 s', 'payout', ARRAY[$3 || chr(31) || 'PO-' || $3 || '-' || g], 'attempts-exhausted', 3, $2
       FROM generate_series(1, $4::int) AS g`,
      [merchant.endpoints[0]!.id, JSON.stringify(sampleEvent('payout', id)), id, count],
    );
    return { DATABASE_URL: db.url };
  }

  it('failed resend gives up waiting for the confirm after its deadline, saying the copy may still be delivered', async () => {
    const env = await failuresOf('m_blocked_resend', 1);
    const result = await endsWithin(20_000, ['failed', 'resend', 'PO-m_blocked_resend-1', '--merchant', 'm_blocked_resend'], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`RabbitMQ did not confirm 1 resent copy within ${CLI_BROKER_DEADLINE_MS} ms`);
    oneLine(result.stderr);
  }, 30_000);

  it('failed replay gives up waiting for the confirm after its deadline, and still prints its summary', async () => {
    const env = await failuresOf('m_blocked_replay', 1);
    const result = await endsWithin(20_000, ['failed', 'replay', '--merchant', 'm_blocked_replay', '--since', '1h'], env);
    expect(result.code).toBe(1);
    expect(result.stdout).toMatch(/^replay of merchant m_blocked_replay: resent 0, skipped 0, errors 1\n$/);
    expect(result.stderr).toContain(`RabbitMQ did not confirm 1 resent copy within ${CLI_BROKER_DEADLINE_MS} ms`);
    // The progress line, the replay's errors and the unconfirmed copy: no stack trace.
    expect(result.stderr).not.toMatch(/TypeError|\n\s+at /);
  }, 30_000);
});
