/**
 * A resend whose copy went out while PostgreSQL was away for a moment (its mark as resent refused):
 * the API marks it once PostgreSQL answers again, so a later resend of the reference finds it
 * resent (404) rather than sending a second copy. The dispatcher is paused: nothing else marks the
 * copy (as when the dispatcher lost PostgreSQL too, or dispatch has a backlog).
 */
import type { ApiProgram } from '../../apps/api/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type FailedStore, ResendService } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { call, indexFailure, startTestApi, token } from '../support/api.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { waitFor } from '../support/wait.js';

describe('a resent copy whose mark PostgreSQL refused', () => {
  const merchant = testMerchant('m_markretry', 'https://markretry.example/hook');
  let harness: Harness;
  let api: ApiProgram;

  beforeAll(async () => {
    harness = await startHarness({ name: 'resend-mark-retry', merchants: [merchant], paused: true });
    api = await startTestApi(harness.prefix, harness.merchantsFile);
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
});
