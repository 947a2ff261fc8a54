/**
 * @runs-alone sets a memory alarm on the shared broker: every publisher on it is blocked meanwhile
 */
import type { ApiProgram } from '../../apps/api/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { call, startTestApi, token, unresolved, indexFailure } from '../support/api.js';
import { brokerUrl } from '../support/broker.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { localCtl } from '../support/rabbitmqctl.js';

const ctl = localCtl();
// Raising a memory alarm needs rabbitmqctl on the broker's own machine.
const maybe = ctl ? describe : describe.skip;

maybe('under broker flow control', () => {
  let receiver: Receiver;
  let harness: Harness;
  let api: ApiProgram;
  let watermark = '0.4';

  beforeAll(async () => {
    brokerUrl();
    const { stdout } = await ctl!(['eval', 'vm_memory_monitor:get_vm_memory_high_watermark().']);
    if (/^[\d.]+$/.test(stdout.trim())) watermark = stdout.trim();
    receiver = await Receiver.start(() => 500);
    harness = await startHarness({ name: 'flow', merchants: [testMerchant('m_flow', 'http://placeholder')], retryDelaysMs: [] });
  });

  afterAll(async () => {
    // Never leave the shared broker blocked.
    await ctl!(['set_vm_memory_high_watermark', watermark]).catch(() => {});
    await api?.stop();
    await harness?.close();
    await receiver?.close();
  });

  it('answers a resend with 503 within its deadline instead of hanging while publishers are blocked', async () => {
    const merchant = testMerchant('m_flow2', receiver.url);
    // The confirm's deadline a second, not the program's 5 s: the 503 is under test, not its length,
    // and this file runs alone (each of its seconds is one of CI's).
    api = await startTestApi(harness.prefix, [merchant], { resendConfirmDeadlineMs: 1_000 });
    const auth = { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` };

    // A failure for it, indexed as the dispatcher would.
    const message = sampleEvent('payout', merchant.id);
    const reference = String(message.data.reference);
    await indexFailure(api, message, 'evt_flow', reference, merchant.endpoints[0]!.id);
    expect(await unresolved(api, merchant.id, reference)).toBe(1);

    await ctl!(['set_vm_memory_high_watermark', '0.0000001']);
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
      await ctl!(['set_vm_memory_high_watermark', watermark]);
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
