/**
 * Sets a memory alarm, on a RabbitMQ node of this file's own (test/support/private-rabbitmq.ts):
 * every publisher on it is blocked meanwhile, and no other file's, so it runs beside the others.
 */
import type { ApiProgram } from '../../apps/api/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { call, startTestApi, token, unresolved, indexFailure } from '../support/api.js';
import { type Harness, startHarness, testMerchant, writeMerchantsFile } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { PrivateRabbitMQ } from '../support/private-rabbitmq.js';
import { waitFor } from '../support/wait.js';

// A node of its own needs the machine's rabbitmq-server, and root.
const maybe = PrivateRabbitMQ.available() ? describe : describe.skip;

maybe('under broker flow control', () => {
  let receiver: Receiver;
  let harness: Harness;
  let api: ApiProgram;
  let watermark = '0.4';
  let node: PrivateRabbitMQ | undefined;
  const sharedUrl = process.env.RABBITMQ_URL;

  beforeAll(async () => {
    node = await PrivateRabbitMQ.start();
    // The harness, the API and the programs all connect where RABBITMQ_URL says.
    process.env.RABBITMQ_URL = node.url;
    const { stdout } = await node.ctl(['eval', 'vm_memory_monitor:get_vm_memory_high_watermark().']);
    if (/^[\d.]+$/.test(stdout.trim())) watermark = stdout.trim();
    receiver = await Receiver.start(() => 500);
    harness = await startHarness({ name: 'flow', merchants: [testMerchant('m_flow', 'http://placeholder')], retryDelaysMs: [] });
  }, 180_000);

  afterAll(async () => {
    await node?.setMemoryHighWatermark(watermark).catch(() => {});
    await api?.stop();
    await harness?.close();
    await receiver?.close();
    await node?.stop();
    process.env.RABBITMQ_URL = sharedUrl;
  });

  it('answers a resend with 503 within its deadline instead of hanging while publishers are blocked', async () => {
    const merchant = testMerchant('m_flow2', receiver.url);
    const file = writeMerchantsFile([merchant]);
    api = await startTestApi(harness.prefix, file);
    const auth = { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` };

    // A failure for it, indexed as the dispatcher would.
    const message = sampleEvent('payout', merchant.id);
    const reference = String(message.data.reference);
    await indexFailure(api, message, 'evt_flow', reference);
    expect(await unresolved(api, merchant.id, reference)).toBe(1);

    await node!.setMemoryHighWatermark('0.0000001');
    try {
      const started = Date.now();
      let timer: NodeJS.Timeout | undefined;
      const answer = await Promise.race([
        call(api, `/nucleus/tnx/webhook?reference=${reference}`, { headers: auth }),
        new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('the resend hung for 20 s')), 20_000))),
      ]).finally(() => clearTimeout(timer));
      expect(answer.status).toBe(503);
      expect(Date.now() - started).toBeLessThan(15_000);
    } finally {
      await node!.setMemoryHighWatermark(watermark);
    }
    // Once the alarm clears the blocked claim is free: the same resend goes through (200), unless the
    // copy the broker held was confirmed once unblocked and marked as sent as soon as it was (issue 54:
    // no second resend claims a copy already sent): then nothing is left to resend (404, seen under
    // CI's load). A claim left held would answer neither.
    await waitFor('resend accepted, or the held copy sent', async () => {
      const again = await call(api, `/nucleus/tnx/webhook?reference=${reference}`, { headers: auth });
      if (again.status === 404) return (await unresolved(api, merchant.id, reference)) === 0;
      return again.status === 200;
    }, 30_000, 500);
  }, 90_000);
});
