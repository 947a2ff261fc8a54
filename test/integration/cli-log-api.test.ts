import { resolve } from 'node:path';
import { sampleEvent } from '../../libs/contracts/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { adminToken } from '../support/api.js';
import { type PortalStack, startPortalStack } from '../support/portal.js';
import { runProgram } from '../support/process.js';
import { Receiver } from '../support/receiver.js';

const CLI = resolve('dist/apps/cli/main.js');

/**
 * `webhooks log` without DATABASE_URL against an API on PostgreSQL, as an operator points it at a
 * deployment (WEBHOOKS_API_URL, WEBHOOKS_ADMIN_TOKEN), for a reference with many webhooks. The CLI
 * reads their timelines one at a time, within the API's bound on one merchant's reads (2 in
 * flight, 8 waiting, the rest 429); reading all 20 at once also passed here (they overlapped
 * little), so this test shows the path works, not that the bound would have been met.
 */
describe('webhooks log through the admin API of a deployment', () => {
  let stack: PortalStack;
  let receiver: Receiver;

  beforeAll(async () => {
    receiver = await Receiver.start(() => 204);
    stack = await startPortalStack('cli-log-api', 1);
    await stack.putMerchant('m_many', `${receiver.url}/many`);
  }, 60_000);

  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  it("shows the timelines of a reference's 20 webhooks", async () => {
    const publisher = new EventPublisher(stack.dispatcher.broker, stack.prefix);
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const message = sampleEvent('payout', 'm_many');
      (message.data as Record<string, unknown>).reference = 'PO-MANY';
      ids.push((await publisher.publish(message)).messageId);
    }
    for (const id of ids) await stack.logged('m_many', id, 'delivered');
    const env = { WEBHOOKS_API_URL: `http://127.0.0.1:${stack.apis[0]!.port}`, WEBHOOKS_ADMIN_TOKEN: await adminToken() };
    const result = await runProgram(CLI, env, ['log', '--merchant', 'm_many', '--reference', 'PO-MANY']);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout.match(/PO-MANY {2}first seen/g)).toHaveLength(20);
  }, 60_000);

  it('reads webhooks whose id is . or .. (well-formed ids, which a URL would take for its own path segments)', async () => {
    const publisher = new EventPublisher(stack.dispatcher.broker, stack.prefix);
    for (const id of ['.', '..']) {
      const message = sampleEvent('payout', 'm_many');
      (message.data as Record<string, unknown>).reference = `PO-DOT-${id.length}`;
      await publisher.publish(message, { messageId: id });
      await stack.logged('m_many', id, 'delivered');
    }
    const env = { WEBHOOKS_API_URL: `http://127.0.0.1:${stack.apis[0]!.port}`, WEBHOOKS_ADMIN_TOKEN: await adminToken() };
    for (const id of ['.', '..']) {
      const result = await runProgram(CLI, env, ['log', '--merchant', 'm_many', '--webhook-id', id]);
      expect({ id, code: result.code, stderr: result.stderr }).toEqual({ id, code: 0, stderr: '' });
      expect(result.stdout.split('\n')[0]).toMatch(new RegExp(`^${id.replaceAll('.', '\\.')}  payout  PO-DOT-${id.length}  first seen `));
    }
    // Through --reference too: each of its webhooks is read by its id.
    const byReference = await runProgram(CLI, env, ['log', '--merchant', 'm_many', '--reference', 'PO-DOT-2', '--json']);
    expect(byReference.code).toBe(0);
    expect((JSON.parse(byReference.stdout) as Array<{ webhookId: string }>).map((w) => w.webhookId)).toEqual(['..']);
  }, 60_000);
});
