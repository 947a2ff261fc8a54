/**
 * The CLI on a broker that takes publishes but never confirms them, as one whose memory or disk
 * alarm blocks its publishers (a proxy drops the confirms, so the shared broker is never blocked):
 * each command that publishes gives up after its deadline and says what may have happened, instead
 * of waiting forever.
 */
import { CLI_BROKER_DEADLINE_MS } from '../../apps/cli/broker.js';
import { HEADERS } from '../../libs/contracts/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { FrozenProxy } from '../support/frozen-proxy.js';

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

  beforeAll(async () => {
    test = await TestBroker.open();
    proxy = await FrozenProxy.start(brokerUrl());
    proxy.dropConfirms();
    // invalid as the programs would have it; publish (the first test) declares events and dispatch.
    await test.channel.assertQueue(names.invalid, { durable: true });
  });

  afterAll(async () => {
    await proxy?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
  });

  /** The command's end, or a failure naming the hang: a CLI waiting for a confirm waits forever. */
  async function endsWithin(ms: number, args: string[]) {
    let timer: NodeJS.Timeout | undefined;
    const hung = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`webhooks ${args.join(' ')} still waiting after ${ms} ms`)), ms)));
    try {
      return await Promise.race([runCliInProcess({ RABBITMQ_URL: proxy.url, TOPOLOGY_PREFIX: prefix }, args), hung]);
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
});

