import { randomUUID } from 'node:crypto';
import { Dispatcher } from '../../apps/dispatcher/dispatcher.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type DeliveryRecord, DeliveryRecorder } from '../../libs/delivery-log/index.js';
import { type Database, DeliveryLogRecorder, deliveryLogQueries } from '../../libs/delivery-store/index.js';
import { ensurePartitionsFor, prepareRows, storeBatch } from '../../libs/delivery-store/materialise.js';
import { createUndiciClient } from '../../libs/http/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { WaitWriter } from '../../libs/waits/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { useTestDatabase } from '../support/postgres.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A webhook's status and next attempt follow its own order (resend, attempt number, rank, stream
 * position), never the clocks of the hosts that wrote its records.
 */
describe('the delivery log orders each webhook by its attempts, not by host clocks', () => {
  const postgres = useTestDatabase('log_order');

  const statusOf = async (merchantId: string, webhookId: string) =>
    (await postgres.db.query<{ status: string; next_attempt_at: Date | null; last_error: string | null; last_http_status: number | null }>(
      'SELECT status, next_attempt_at, last_error, last_http_status FROM delivery_webhooks WHERE merchant_id = $1 AND webhook_id = $2',
      [merchantId, webhookId],
    ))[0];

  it('leaves a delivered webhook delivered when the dispatcher that retried it runs two minutes ahead of the one that delivered it', async () => {
    const receiver = await Receiver.start(failOnceThenSucceed());
    const merchant = testMerchant('m_order', `${receiver.url}/order`);
    // Dispatcher A: its clock two minutes ahead of dispatcher B's (the host's). At 30 s the premise
    // (A's record the later) failed in CI when B's delivery came more than 30 s after A's attempt on
    // a loaded machine. Any skew that puts A's record later is the case: a status taken from the
    // clocks shows `retrying` whatever its size.
    // The retry's wait is due 3 s after A's attempt: A is stopped as soon as that wait is written (before
    // its ack), so the second attempt is B's. With 300 ms, a loaded machine let A's own consumer take the
    // hand-back before its stop, and both records carried A's clock (CI, 2026-11-30).
    const harness: Harness = await startHarness({ name: 'log-order', merchants: [merchant], retryDelaysMs: [3_000], deliveryLog: true, now: () => new Date(Date.now() + 120_000) });
    const recorder = new DeliveryLogRecorder(harness.broker, postgres.database, silentLogger(), { prefix: harness.prefix, retentionMs: 30 * 86_400_000, retryMs: 200 });
    const logB = new DeliveryRecorder(harness.broker, silentLogger(), { prefix: harness.prefix });
    const http = createUndiciClient({ allowPrivateTargets: true, responseBodyBytes: 1024 });
    // B ends the wait A wrote (the harness's scheduler hands it back to dispatch on time).
    const writer = new WaitWriter(harness.waits, silentLogger());
    let b: Dispatcher | undefined;
    try {
      await recorder.start();
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
      await waitFor('A\'s retry waiting', async () => (await harness.database.query('SELECT 1 FROM webhook_waits WHERE webhook_id = $1', [messageId])).length === 1, 20_000);
      // A stops before its retry comes back: B, on the host's clock, makes the second attempt.
      await harness.dispatcher.stop();
      await waitFor('A retrying it in the log', async () => (await statusOf(merchant.id, messageId))?.status === 'retrying', 20_000);
      await logB.start();
      b = new Dispatcher(
        { broker: harness.broker, merchants: harness.merchants, http, logger: silentLogger(), deliveryLog: logB, waits: { store: harness.waits, writer } },
        { prefix: harness.prefix, retryDelaysMs: [300], deliveryTimeoutMs: 2_000, concurrency: 4, maxMessageBytes: 64 * 1024, userAgent: 'test-dispatcher-b', drainTimeoutMs: 5_000 },
      );
      await b.start();
      await receiver.waitForRequests(2, 15_000);
      await waitFor('both records stored', async () => (await postgres.db.query<{ n: string }>('SELECT count(*) AS n FROM delivery_records WHERE webhook_id = $1', [messageId]))[0]?.n === '2', 20_000);
      const records = await postgres.db.query<{ outcome: string; at: Date }>('SELECT outcome, at FROM delivery_records WHERE webhook_id = $1 ORDER BY attempt_number', [messageId]);
      // The premise: the retry's record carries the later time.
      expect(records.map((r) => r.outcome)).toEqual(['retrying', 'delivered']);
      expect(records[0]!.at.getTime()).toBeGreaterThan(records[1]!.at.getTime());
      expect(await statusOf(merchant.id, messageId)).toMatchObject({ status: 'delivered', next_attempt_at: null });
      // What the merchant reads: both attempts, B's delivery too, though its time is before the
      // first-seen time A's clock gave the webhook; and the delivered attempt's HTTP status, not
      // the retry's, whose clock read later.
      const detail = await deliveryLogQueries(postgres.database).getWebhook(merchant.id, messageId);
      // In the webhook's order: the retry first, though its host's clock read later.
      expect(detail?.records.map((r) => [r.outcome, r.attemptNumber, r.httpStatus])).toEqual([['retrying', 1, 500], ['delivered', 2, 204]]);
      expect(detail).toMatchObject({ status: 'delivered', attempts: 2, lastHttpStatus: 204, nextAttemptAt: null });
    } finally {
      await b?.stop();
      writer.close();
      await logB.stop();
      await recorder.stop();
      await harness.close();
      http.close();
      await receiver.close();
    }
  }, 60_000);

  describe('which record wins', () => {
    let session: Awaited<ReturnType<Database['session']>>;
    let offset = 0;

    beforeAll(async () => {
      session = await postgres.database.session();
    });

    afterAll(async () => {
      await session?.close();
    });

    const record = (webhookId: string, outcome: DeliveryRecord['outcome'], attemptNumber: number, secondsAgo: number, extra: Partial<DeliveryRecord> = {}): DeliveryRecord => ({
      id: randomUUID(),
      at: new Date(Date.now() - secondsAgo * 1000).toISOString(),
      webhookId,
      merchantId: 'm_rank',
      event: 'payout',
      references: ['PO-rank'],
      firstSeenAt: new Date(Date.now() - 3_600_000).toISOString(),
      outcome,
      attemptNumber,
      ...(outcome === 'retrying' || outcome === 'postponed' ? { nextAttemptAt: new Date(Date.now() + 60_000).toISOString() } : {}),
      ...extra,
    });

    /** Each batch is one stream message further on: later batches have later stream positions. */
    async function store(...batches: DeliveryRecord[][]): Promise<void> {
      for (const batch of batches) {
        await ensurePartitionsFor(session, batch);
        offset++;
        await storeBatch(session, 'order-test', prepareRows(batch, batch.map((_, i) => offset * 1024 + i)), offset + 1, null);
      }
    }

    it('a higher attempt wins whatever its time, in one batch or across batches', async () => {
      await store([record('wh_a', 'delivered', 2, 60), record('wh_a', 'retrying', 1, 0)]);
      expect(await statusOf('m_rank', 'wh_a')).toMatchObject({ status: 'delivered', next_attempt_at: null });
      await store([record('wh_b', 'delivered', 2, 60)], [record('wh_b', 'retrying', 1, 0)]);
      expect(await statusOf('m_rank', 'wh_b')).toMatchObject({ status: 'delivered', next_attempt_at: null });
    });

    it('for the same attempt, an end wins over a retry, and a wait before the next attempt over the retry it follows', async () => {
      await store([record('wh_c', 'delivered', 1, 60)], [record('wh_c', 'retrying', 1, 0)]);
      expect(await statusOf('m_rank', 'wh_c')).toMatchObject({ status: 'delivered' });
      await store([record('wh_d', 'postponed', 2, 60, { reason: 'circuit-open' })], [record('wh_d', 'retrying', 2, 0, { attempt: { startedAt: new Date().toISOString(), durationMs: 1, error: 'http_500' } })]);
      expect(await statusOf('m_rank', 'wh_d')).toMatchObject({ status: 'retrying', last_error: 'circuit-open' });
    });

    it('a resend\'s records win over the failure before it, even its first wait and even with an earlier time', async () => {
      await store([record('wh_e', 'failed', 3, 0, { reason: 'attempts-exhausted' })], [record('wh_e', 'postponed', 0, 120, { resend: 1, reason: 'circuit-open' })]);
      expect(await statusOf('m_rank', 'wh_e')).toMatchObject({ status: 'retrying' });
      await store([record('wh_e', 'delivered', 1, 100, { resend: 1 })], [record('wh_e', 'retrying', 2, 0)]);
      expect(await statusOf('m_rank', 'wh_e')).toMatchObject({ status: 'delivered', next_attempt_at: null });
    });

    it('the last HTTP status is the last attempt\'s in that order, whatever its time, in one batch or across batches', async () => {
      // Started when its record was made, by its host's clock.
      const attempt = (httpStatus: number, secondsAgo: number) => ({ attempt: { startedAt: new Date(Date.now() - secondsAgo * 1000).toISOString(), durationMs: 1, httpStatus } });
      await store([record('wh_g', 'delivered', 2, 60, attempt(200, 60)), record('wh_g', 'retrying', 1, 0, attempt(500, 0))]);
      expect(await statusOf('m_rank', 'wh_g')).toMatchObject({ status: 'delivered', last_http_status: 200 });
      await store([record('wh_h', 'delivered', 2, 60, attempt(204, 60))], [record('wh_h', 'retrying', 1, 0, attempt(503, 0))]);
      expect(await statusOf('m_rank', 'wh_h')).toMatchObject({ status: 'delivered', last_http_status: 204 });
      // A resend's attempt follows the failure before it, even with an earlier time.
      await store([record('wh_i', 'failed', 3, 0, { reason: 'attempts-exhausted', ...attempt(500, 0) })], [record('wh_i', 'delivered', 1, 100, { resend: 1, ...attempt(200, 100) })]);
      expect(await statusOf('m_rank', 'wh_i')).toMatchObject({ status: 'delivered', last_http_status: 200 });
    });

    it("lists a webhook's records in its own order (resend, attempt, rank, stream position), each endpoint's apart, whatever their times", async () => {
      const detailOf = (webhookId: string) => deliveryLogQueries(postgres.database).getWebhook('m_rank', webhookId);
      // Retried on a host 90 s ahead, failed on one behind, then resent on one further behind; a wait for the next attempt before its retry.
      await store(
        [record('wh_j', 'retrying', 1, 0), record('wh_j', 'postponed', 1, 30, { reason: 'circuit-open' })],
        [record('wh_j', 'failed', 2, 60, { reason: 'attempts-exhausted' })],
        [record('wh_j', 'delivered', 1, 120, { resend: 1 })],
      );
      expect((await detailOf('wh_j'))?.records.map((r) => [r.outcome, r.attemptNumber])).toEqual([['retrying', 1], ['postponed', 1], ['failed', 2], ['delivered', 1]]);
      // Fanned out: each endpoint's records in its own order, whichever host's clock is ahead.
      const on = (endpointId: string) => ({ endpointId });
      await store(
        [record('wh_k', 'retrying', 1, 0, on('ep_b')), record('wh_k', 'retrying', 1, 10, on('ep_a'))],
        [record('wh_k', 'delivered', 2, 50, on('ep_b')), record('wh_k', 'failed', 2, 40, on('ep_a'))],
      );
      const fanned = await detailOf('wh_k');
      expect(fanned?.records.map((r) => [r.endpointId, r.outcome, r.attemptNumber])).toEqual([
        ['ep_a', 'retrying', 1], ['ep_a', 'failed', 2], ['ep_b', 'retrying', 1], ['ep_b', 'delivered', 2],
      ]);
    });

    it('for the same attempt and rank, the later stream position wins', async () => {
      await store([record('wh_f', 'failed', 2, 0, { reason: 'attempts-exhausted' })], [record('wh_f', 'delivered', 2, 60)]);
      expect(await statusOf('m_rank', 'wh_f')).toMatchObject({ status: 'delivered' });
    });
  });
});
