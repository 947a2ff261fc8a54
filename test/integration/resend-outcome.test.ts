/**
 * @runs-alone sets a memory alarm on the shared broker: every publisher on it is blocked meanwhile
 */
import type { ApiProgram } from '../../apps/api/program.js';
import { Dispatcher } from '../../apps/dispatcher/dispatcher.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type FailedStore, ResendService } from '../../libs/failed/index.js';
import { createUndiciClient } from '../../libs/http/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { call, expectDocumented, seen, startTestApi, token, unresolved, indexFailure } from '../support/api.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { localCtl } from '../support/rabbitmqctl.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const RESEND = '/nucleus/tnx/webhook';
const ctl = localCtl();
// Raising a memory alarm needs rabbitmqctl on the broker's own machine.
const maybe = ctl ? describe : describe.skip;

maybe('a resend whose outcome is not known delivers once', () => {
  let receiver: Receiver;
  let harness: Harness;
  let one: ApiProgram;
  let two: ApiProgram;
  let merchant: Merchant;
  let watermark = '0.4';
  let dispatcher: Dispatcher | undefined;
  const http = createUndiciClient({ allowPrivateTargets: true });

  beforeAll(async () => {
    const { stdout } = await ctl!(['eval', 'vm_memory_monitor:get_vm_memory_high_watermark().']);
    if (/^[\d.]+$/.test(stdout.trim())) watermark = stdout.trim();
    receiver = await Receiver.start(() => 200);
    merchant = testMerchant('m_unknown', receiver.url);
    harness = await startHarness({ name: 'resendunknown', merchants: [merchant] });
    // No dispatcher until the merchant has retried: one that consumed a copy early would resolve
    // the entry itself and hide a second republish.
    await harness.dispatcher.stop();
    // The confirm's deadline a second, not the program's 5 s: what the blocked copy's resend answers is
    // under test, not how long it waited, and this file runs alone (each of its seconds is one of CI's).
    one = await startTestApi(harness.prefix, [], { resendConfirmDeadlineMs: 1_000 });
    two = await startTestApi(harness.prefix, [], { resendConfirmDeadlineMs: 1_000 });
  });

  afterAll(async () => {
    // Never leave the node blocked.
    await ctl!(['set_vm_memory_high_watermark', watermark]).catch(() => {});
    await dispatcher?.stop();
    await one?.stop();
    await two?.stop();
    await harness?.close();
    await receiver?.close();
    http.close();
  });

  afterEach(async () => {
    await dispatcher?.stop();
    dispatcher = undefined;
  });

  async function headers(): Promise<Record<string, string>> {
    return { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` };
  }

  /** A failure as the dispatcher indexes it once it is in `failed`. */
  async function failedEntry(id: string): Promise<{ reference: string }> {
    const message = sampleEvent('payout', merchant.id);
    const reference = String(message.data.reference);
    await indexFailure(one, message, id, reference, merchant.endpoints[0]!.id);
    expect(await unresolved(two, merchant.id, reference)).toBe(1);
    return { reference };
  }

  async function startDispatcher(): Promise<void> {
    dispatcher = new Dispatcher(
      { broker: harness.broker, merchants: harness.merchants, http, logger: silentLogger(), failures: two.failures },
      { prefix: harness.prefix, retryDelaysMs: [], deliveryTimeoutMs: 2_000, concurrency: 4, maxMessageBytes: 64 * 1024, userAgent: 'test-dispatcher' },
    );
    await dispatcher.start();
  }

  /** POSTs of a webhook-id once dispatch is empty and the dispatcher idle. */
  async function deliveriesOf(id: string): Promise<number> {
    await waitFor('dispatch drained', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0 && receiver.requests.some((r) => r.headers['webhook-id'] === id), 15_000);
    const inFlight = (dispatcher as unknown as { inFlight: Set<unknown> }).inFlight;
    await waitFor('dispatcher idle', () => inFlight.size === 0);
    return receiver.requests.filter((r) => r.headers['webhook-id'] === id).length;
  }

  it('keeps the claim of a republish blocked by a memory alarm: 503, then 409 on every replica, one POST after the alarm clears', async () => {
    const { reference } = await failedEntry('evt_alarm');
    // The alarm goes up after the claim was committed, before the republish.
    const sendToQueue = one.broker.sendToQueue.bind(one.broker);
    let alarmed = false;
    one.broker.sendToQueue = async (queue, ...rest) => {
      if (queue === harness.names.dispatch && !alarmed) {
        alarmed = true;
        await ctl!(['set_vm_memory_high_watermark', '0.0000001']);
      }
      return sendToQueue(queue, ...rest);
    };
    try {
      const first = await call(one, `${RESEND}?reference=${reference}`, { headers: await headers() });
      expect(alarmed).toBe(true);
      expect(first.status).toBe(503);
      expect(first.body).toMatchObject({ error: { code: 'resend_outcome_unknown', status: 503 }, data: null });
      expect(first.headers.get('retry-after')).toBe('30');

      // The merchant retries within the lease, on either replica, while publishers are still blocked.
      for (const api of [one, two]) {
        const again = await call(api, `${RESEND}?reference=${reference}`, { headers: await headers() });
        expect(again.status).toBe(409);
        expect(again.body).toMatchObject({ error: { code: 'resend_in_progress', status: 409 }, data: null });
        expect(Number(again.headers.get('retry-after'))).toBeGreaterThan(0);
      }
    } finally {
      await ctl!(['set_vm_memory_high_watermark', watermark]);
      one.broker.sendToQueue = sendToQueue;
    }

    // The blocked copy lands once the alarm clears; the merchant keeps retrying: never a 200.
    await waitFor('the late copy marked resent', async () => {
      for (const api of [one, two]) {
        const again = await call(api, `${RESEND}?reference=${reference}`, { headers: await headers() });
        expect([404, 409]).toContain(again.status);
      }
      return (await unresolved(one, merchant.id, reference)) === 0;
    }, 30_000, 500);
    expect(await harness.test.messageCount(harness.names.dispatch)).toBe(1);
    await startDispatcher();
    expect(await deliveriesOf('evt_alarm')).toBe(1);
    expect((await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(404);
  }, 120_000);

  it('does not republish a confirmed copy whose mark as resent failed when the merchant retries', async () => {
    const { reference } = await failedEntry('evt_noresolution');
    // This resender's marks fail as a database that went away between the claim and the mark would.
    const store = Object.create(one.failures) as FailedStore;
    store.markResent = () => Promise.reject(new Error('connection terminated'));
    const resender = new ResendService(one.broker, store, harness.prefix, silentLogger());
    // The copy is in dispatch: that is a resend done, whatever became of the mark.
    await expect(resender.resend(merchant, reference)).resolves.toBe(1);

    // The merchant retries at once on the other replica: the claim still holds there.
    const again = await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() });
    expect(again.status).toBe(409);
    expect(await harness.test.messageCount(harness.names.dispatch)).toBe(1);

    // The dispatcher marks it resent on the copy's first handling: then nothing is left to resend.
    await startDispatcher();
    expect(await deliveriesOf('evt_noresolution')).toBe(1);
    await waitFor('marked by the dispatcher', async () => (await unresolved(two, merchant.id, reference)) === 0);
    expect((await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(404);
    expect(await deliveriesOf('evt_noresolution')).toBe(1);
  }, 60_000);

  it('gives only answers the OpenAPI document describes', () => {
    const statuses = expectDocumented(seen);
    expect(statuses).toContain('/nucleus/tnx/webhook 503');
    expect(statuses).toContain('/nucleus/tnx/webhook 409');
  });
});
