/**
 * Resends that lose PostgreSQL after their claim. A copy that went out while PostgreSQL was away
 * for a moment (its mark as resent refused): the API marks it once PostgreSQL answers again, so a
 * later resend of the reference finds it resent (404) rather than sending a second copy. A long
 * resend whose lease renewal fails midway: its answer does not say that nothing was resent. The
 * dispatcher is paused: nothing else marks a copy (as when the dispatcher lost PostgreSQL too, or
 * dispatch has a backlog), and the copies stay in dispatch to be counted.
 */
import type { ApiProgram } from '../../apps/api/program.js';
import { toApiError } from '../../apps/api/translate.js';
import type { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type FailedStore, FailureIndexUnavailableError, ResendService } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { call, indexFailure, startTestApi, token } from '../support/api.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { waitFor } from '../support/wait.js';

describe('a resend that loses PostgreSQL after its claim', () => {
  const merchant = testMerchant('m_markretry', 'https://markretry.example/hook');
  let harness: Harness;
  let api: ApiProgram;

  beforeAll(async () => {
    harness = await startHarness({ name: 'resend-mark-retry', merchants: [merchant], paused: true });
    api = await startTestApi(harness.prefix);
  });

  afterAll(async () => {
    await api?.stop();
    await harness?.close();
  });

  it('is marked resent once PostgreSQL answers again, so a later resend sends no second copy', async () => {
    const message = sampleEvent('payout', merchant.id);
    const reference = String(message.data.reference);
    const webhookId = `wh_markretry_${Date.now()}`;
    await indexFailure(api, message, webhookId, reference, merchant.endpoints[0]!.id);
    // PostgreSQL away between the claim and the mark: the mark is refused, nothing else is.
    let away = true;
    const store = new Proxy(api.failures, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (prop === 'markResent') return (...args: Parameters<FailedStore['markResent']>) => (away ? Promise.reject(new Error('Connection terminated unexpectedly')) : target.markResent(...args));
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as FailedStore;
    const resends = new ResendService(api.broker, store, harness.prefix, silentLogger());
    try {
      expect(await resends.resend(merchant, reference)).toBe(1);
      away = false;
      const resentAt = async () => (await harness.database.query<{ resent: boolean }>('SELECT resent_at IS NOT NULL AS resent FROM failed_webhooks WHERE webhook_id = $1', [webhookId]))[0]?.resent;
      await waitFor('marked resent once PostgreSQL is back', resentAt, 5_000);
      // Long after the claim's lease: the merchant asks again, and nothing is left to resend.
      await harness.database.query("UPDATE failed_webhooks SET claimed_at = claimed_at - interval '31 seconds' WHERE webhook_id = $1", [webhookId]);
      const again = await call(api, `/nucleus/tnx/webhook?reference=${reference}`, { headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` } });
      expect(again.status).toBe(404);
      expect(await harness.test.messageCount(harness.names.dispatch)).toBe(1);
    } finally {
      await resends.drain();
    }
  });

  it('answers a lease renewal refused midway without saying that nothing was resent, and the retry sends only the rest', async () => {
    // The first test's copy may still be in dispatch: counted from here.
    const before = await harness.test.messageCount(harness.names.dispatch);
    const message = sampleEvent('payout', merchant.id);
    const reference = String(message.data.reference);
    const ids = [0, 1, 2, 3].map((i) => `wh_renewal_${Date.now()}_${i}`);
    for (const id of ids) await indexFailure(api, message, id, reference, merchant.endpoints[0]!.id);
    // A slow broker (each copy 150 ms) against a 300 ms lease: renewed every 100 ms, and the second renewal is refused.
    let renewals = 0;
    const store = new Proxy(api.failures, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (prop === 'renew') return (...args: Parameters<FailedStore['renew']>) => (++renewals >= 2 ? Promise.reject(new Error('Connection terminated unexpectedly')) : target.renew(...args));
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as FailedStore;
    const broker = new Proxy(api.broker, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (prop === 'sendToQueue') return async (...args: Parameters<BrokerConnection['sendToQueue']>) => {
          await new Promise((resolve) => setTimeout(resolve, 150));
          return target.sendToQueue(...args);
        };
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as BrokerConnection;
    const resends = new ResendService(broker, store, harness.prefix, silentLogger(), { leaseMs: 300 });
    const err = await resends.resend(merchant, reference).then(() => undefined, (e: unknown) => e);
    const went = (await harness.test.messageCount(harness.names.dispatch)) - before;
    expect(err).toMatchObject({ name: 'ResendStoppedError', sent: went, cause: expect.any(FailureIndexUnavailableError) });
    expect(went).toBeGreaterThan(0);
    expect(went).toBeLessThan(ids.length);
    const answer = toApiError(err, silentLogger());
    expect([answer.status, answer.code]).toEqual([503, 'service_unavailable']);
    expect(answer.message).not.toMatch(/nothing was resent/);
    // The merchant tries again: only what did not go out goes now.
    const again = await call(api, `/nucleus/tnx/webhook?reference=${reference}`, { headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` } });
    expect(again.status).toBe(200);
    expect((await harness.test.messageCount(harness.names.dispatch)) - before).toBe(ids.length);
  });
});
