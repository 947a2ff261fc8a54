import { randomUUID } from 'node:crypto';
import type { ApiProgram } from '../../apps/api/program.js';
import type { BrokerConnection } from '../../libs/broker/index.js';
import { BrokerUnavailableError, BrokerUnroutableError } from '../../libs/broker/index.js';
import { ENTRY_TYPES, HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { INDEX_FROM_LOG, ResendService } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { call, expectDocumented, seen, startTestApi, token, unresolved } from '../support/api.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const RESEND = '/nucleus/tnx/webhook';

describe('one resend, one delivery', () => {
  let mode: 'fail' | 'ok' = 'fail';
  let receiver: Receiver;
  let harness: Harness;
  let one: ApiProgram;
  let two: ApiProgram;
  let merchant: Merchant;

  beforeAll(async () => {
    receiver = await Receiver.start(() => (mode === 'fail' ? 500 : 200));
    merchant = testMerchant('m_once', receiver.url);
    harness = await startHarness({ name: 'resendonce', merchants: [merchant], retryDelaysMs: [] });
    one = await startTestApi(harness.prefix);
    two = await startTestApi(harness.prefix);
  });

  afterAll(async () => {
    await one?.stop();
    await two?.stop();
    await harness?.close();
    await receiver?.close();
  });

  beforeEach(() => {
    mode = 'fail';
  });

  async function headers(): Promise<Record<string, string>> {
    return { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` };
  }

  async function failed(event: 'payout' | 'refund.completed', messageId?: string) {
    const message = sampleEvent(event, merchant.id);
    const published = await harness.publisher.publish(message, { messageId });
    const reference = String(event === 'refund.completed' ? message.data.refundRef : message.data.reference);
    await waitFor('indexed', async () => (await unresolved(one, merchant.id, reference)) > 0);
    return { message, messageId: published.messageId, reference };
  }

  /** Deliveries of a webhook-id once nothing is in flight or queued any more. */
  /**
   * Deliveries of a webhook once dispatch is quiet. A resend answers before the dispatcher has its
   * copy in hand (dispatch can look empty then), so first wait for `atLeast` of them.
   */
  async function deliveriesOf(messageId: string, atLeast = 2): Promise<number> {
    await waitFor(`${atLeast} deliveries of ${messageId}`, () => receiver.requests.filter((r) => r.headers['webhook-id'] === messageId).length >= atLeast, 10_000);
    const inFlight = (harness.dispatcher as unknown as { inFlight: Set<unknown> }).inFlight;
    await waitFor('dispatch idle', async () => inFlight.size === 0 && (await harness.test.messageCount(harness.names.dispatch)) === 0, 10_000);
    return receiver.requests.filter((r) => r.headers['webhook-id'] === messageId).length;
  }

  /** One 200; every other answer says "in progress" (409) or, once the winner resolved it, "nothing left" (404). */
  function expectOneWinner(statuses: number[]): void {
    expect(statuses.filter((status) => status === 200)).toHaveLength(1);
    for (const status of statuses.filter((s) => s !== 200)) expect([404, 409]).toContain(status);
  }

  it('delivers once when two replicas are asked at the same moment: one 200, the others 409 resend_in_progress or 404', async () => {
    const { messageId, reference } = await failed('payout');
    mode = 'ok';
    const h = await headers();
    const answers = await Promise.all([one, two, one, two].map((api) => call(api, `${RESEND}?reference=${reference}`, { headers: h })));
    expectOneWinner(answers.map((a) => a.status));
    const busy = answers.find((a) => a.status === 409);
    if (busy) {
      expect(busy.body).toMatchObject({ error: { code: 'resend_in_progress', status: 409 }, data: null });
      expect(Number(busy.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    // The first attempt failed (500), then exactly one resend delivery.
    expect(await deliveriesOf(messageId)).toBe(2);
  });

  it('delivers a refund once when resent by its refundRef and by its tnxRef at once', async () => {
    const { message, messageId, reference } = await failed('refund.completed');
    mode = 'ok';
    const h = await headers();
    const answers = await Promise.all([
      call(one, `${RESEND}?reference=${reference}`, { headers: h }),
      call(two, `${RESEND}?reference=${String(message.data.tnxRef)}`, { headers: h }),
    ]);
    expectOneWinner(answers.map((a) => a.status));
    await deliveriesOf(messageId);
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === messageId)).toHaveLength(2);
  });

  it('keeps one failure per webhook: the same failure written by the dispatcher and by the recorder is one row', async () => {
    const { messageId, reference } = await failed('payout', `evt_twice_${Date.now()}`);
    const [row] = await harness.database.query<{ failed_at: Date; content: string; endpoint_id: string }>('SELECT failed_at, content, endpoint_id FROM failed_webhooks WHERE webhook_id = $1', [messageId]);
    // The recorder's durable path, for the same failure: it changes nothing the dispatcher wrote.
    await harness.database.query(
      `INSERT INTO delivery_webhooks (merchant_id, webhook_id, first_seen_at, seq, event, refs, merchant_refs, payload, status, attempts, last_record_at)
       VALUES ($1, $2, now(), 1, 'payout', ARRAY[$3], ARRAY[$1 || chr(31) || $3], '{"event":"payout","data":{}}', 'failed', 1, now())`,
      [merchant.id, messageId, reference],
    );
    await harness.database.query(INDEX_FROM_LOG, [[merchant.id], [messageId], [row!.failed_at.toISOString()], ['attempts-exhausted'], [row!.endpoint_id], [0]]);
    expect(await harness.database.query('SELECT content FROM failed_webhooks WHERE webhook_id = $1', [messageId])).toEqual([{ content: row!.content }]);
    expect(await unresolved(one, merchant.id, reference)).toBe(1);
    mode = 'ok';
    expect((await call(one, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(200);
    expect(await deliveriesOf(messageId)).toBe(2);
    expect(await unresolved(two, merchant.id, reference)).toBe(0);
  });

  it('does not send again what a resend that failed half-way already sent, and sends at once what surely did not go out', async () => {
    // Two failed webhooks for one reference: no queue takes the second copy, nor its one more try
    // after the topology is declared again, so it surely was not stored and its claim is given back.
    const message = sampleEvent('payout', merchant.id);
    const first = await harness.publisher.publish(message);
    const second = await harness.publisher.publish(message, { messageId: `${first.messageId}_2` });
    const reference = String(message.data.reference);
    await waitFor('two failures indexed', async () => (await unresolved(one, merchant.id, reference)) === 2);
    mode = 'ok';
    let republished = 0;
    const flaky = new Proxy(one.broker, {
      get(target, prop, receiverArg) {
        if (prop === 'sendToQueue') {
          return (queue: string, ...rest: unknown[]) => {
            if (queue === harness.names.dispatch && [2, 3].includes(++republished)) return Promise.reject(new BrokerUnroutableError('', queue, 'NO_ROUTE'));
            return (target.sendToQueue as (...a: unknown[]) => Promise<void>).call(target, queue, ...rest);
          };
        }
        const value = Reflect.get(target, prop, receiverArg);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as BrokerConnection;
    const halfway = new ResendService(flaky, one.failures, harness.prefix, silentLogger());
    // Stopped by the broker after its first copy, and says so.
    await expect(halfway.resend(merchant, reference)).rejects.toMatchObject({ name: 'ResendStoppedError', sent: 1, cause: expect.any(BrokerUnavailableError) });
    // Given back at once, not held for the lease: the first marked resent, the second free.
    expect(await harness.database.query('SELECT webhook_id, claim_id IS NULL AS free, resent_at IS NOT NULL AS resent FROM failed_webhooks WHERE webhook_id = ANY($1) ORDER BY webhook_id', [[first.messageId, second.messageId]])).toEqual([
      { webhook_id: first.messageId, free: false, resent: true },
      { webhook_id: second.messageId, free: true, resent: false },
    ]);

    // The merchant tries again at once: only what was not sent goes out.
    expect((await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(200);
    await deliveriesOf(second.messageId);
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === first.messageId)).toHaveLength(2);
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === second.messageId)).toHaveLength(2);
  });

  it('after 503 resend_outcome_unknown midway through a reference, sends at once the failures not yet sent, and holds only the unconfirmed one', async () => {
    // Three failed webhooks of one reference; the API's second copy is nacked (its outcome unknown: the broker may have it).
    const message = sampleEvent('payout', merchant.id);
    const first = await harness.publisher.publish(message);
    const ids = [first.messageId, `${first.messageId}_b`, `${first.messageId}_c`];
    for (const id of ids.slice(1)) await harness.publisher.publish(message, { messageId: id });
    const reference = String(message.data.reference);
    await waitFor('three failures indexed', async () => (await unresolved(one, merchant.id, reference)) === 3);
    mode = 'ok';
    const broker = one.broker as unknown as { sendToQueue: (queue: string, content: Buffer, properties: { messageId?: string }) => Promise<void> };
    const original = broker.sendToQueue;
    const order: string[] = [];
    broker.sendToQueue = function (this: unknown, queue, content, properties) {
      if (queue === harness.names.dispatch && order.push(String(properties.messageId)) === 2) return Promise.reject(new Error('nacked'));
      return original.call(this, queue, content, properties);
    };
    let outcomeUnknown;
    try {
      outcomeUnknown = await call(one, `${RESEND}?reference=${reference}`, { headers: await headers() });
    } finally {
      broker.sendToQueue = original;
    }
    expect(outcomeUnknown.status).toBe(503);
    expect((outcomeUnknown.body as { error: unknown }).error).toEqual({ code: 'resend_outcome_unknown', status: 503 });
    expect(outcomeUnknown.headers.get('retry-after')).toBe('30');
    // Claim order: the first copy went and is marked, the second is held for its lease, the third was never tried and is free.
    expect(order).toHaveLength(2);
    const [sent, unconfirmed] = order as [string, string];
    const untried = ids.find((id) => !order.includes(id))!;
    const rows = await harness.database.query('SELECT webhook_id, claim_id IS NULL AS free, resent_at IS NOT NULL AS resent FROM failed_webhooks WHERE webhook_id = ANY($1)', [ids]);
    expect(new Map(rows.map((r) => [r.webhook_id, { free: r.free, resent: r.resent }]))).toEqual(
      new Map([
        [sent, { free: false, resent: true }],
        [unconfirmed, { free: false, resent: false }],
        [untried, { free: true, resent: false }],
      ]),
    );

    // At once, before Retry-After: not 409, but 200, and only the untried one goes out.
    expect((await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(200);
    await deliveriesOf(untried);
    // Then only the held one is left: 409 until its lease ends.
    const held = await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() });
    expect((held.body as { error: unknown }).error).toEqual({ code: 'resend_in_progress', status: 409 });
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === sent)).toHaveLength(2);
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === unconfirmed)).toHaveLength(1);
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === untried)).toHaveLength(2);
  });

  it('does not send again a webhook republished by a resender that died before marking it resent', async () => {
    const { message, messageId, reference } = await failed('payout');
    mode = 'ok';
    // What a resender does up to its republish, then dies: the claim made, the copy out, no mark.
    const claimId = randomUUID();
    expect(await one.failures.claim(merchant.id, { reference }, claimId)).toHaveLength(1);
    await harness.test.publishRaw(harness.names.dispatch, Buffer.from(JSON.stringify(message)), {
      messageId,
      contentType: 'application/json',
      headers: { [HEADERS.resentAt]: new Date().toISOString(), [HEADERS.claimId]: claimId, [HEADERS.merchantId]: merchant.id },
    });
    await deliveriesOf(messageId);
    // The dispatcher marked it when it took the copy: resent, not merely held until the lease ends.
    await waitFor('marked resent by the dispatcher', async () => (await unresolved(two, merchant.id, reference)) === 0);
    expect((await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(404);
    await deliveriesOf(messageId);
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === messageId)).toHaveLength(2);
  });

  it('frees the claim of a resender that died before its republish once the lease ends, and not before', async () => {
    const { messageId, reference } = await failed('payout');
    mode = 'ok';
    expect(await one.failures.claim(merchant.id, { reference }, randomUUID())).toHaveLength(1);
    const held = await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() });
    expect(held.status).toBe(409);
    expect(Number(held.headers.get('retry-after'))).toBeGreaterThanOrEqual(25);
    // The lease runs out (moved back in time rather than waited for).
    await harness.database.query("UPDATE failed_webhooks SET claimed_at = claimed_at - interval '31 seconds' WHERE webhook_id = $1", [messageId]);
    expect((await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(200);
    expect(await deliveriesOf(messageId)).toBe(2);
  });

  it('refuses the 11th resend of one webhook in 24 hours with 429 too_many_resends, counting only copies that went out', async () => {
    const { messageId, reference } = await failed('payout');
    mode = 'ok';
    const count = async () => (await harness.database.query<{ resends: number }>('SELECT resends FROM failed_webhooks WHERE webhook_id = $1', [messageId]))[0]!.resends;
    // A resend whose copy no queue took sent nothing: not counted.
    const unroutable = new Proxy(one.broker, {
      get(target, prop, receiverArg) {
        if (prop === 'sendToQueue') return () => Promise.reject(new BrokerUnroutableError('', harness.names.dispatch, 'NO_ROUTE'));
        const value = Reflect.get(target, prop, receiverArg);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as BrokerConnection;
    await expect(new ResendService(unroutable, one.failures, harness.prefix, silentLogger()).resend(merchant, reference)).rejects.toMatchObject({ sent: 0, cause: expect.any(BrokerUnavailableError) });
    expect(await count()).toBe(0);
    expect((await call(one, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(200);
    expect(await count()).toBe(1);
    await deliveriesOf(messageId);
    // Nine more resends of it today (the copies failed again each time), made here at once.
    await harness.database.query("UPDATE failed_webhooks SET resends = 10, resent_at = NULL, claim_id = NULL WHERE webhook_id = $1", [messageId]);
    const refused = await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() });
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ error: { code: 'too_many_resends', status: 429 }, data: null });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(23 * 3600);
    expect((await call(two, `/nucleus/webhooks/${messageId}/resend`, { headers: await headers() })).status).toBe(429);
    // A day later it may be resent again, and the count starts over.
    await harness.database.query("UPDATE failed_webhooks SET resends_since = now() - interval '25 hours' WHERE webhook_id = $1", [messageId]);
    expect((await call(two, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(200);
    expect(await count()).toBe(1);
  });

  it('answers 409 webhook_disabled while the webhook is off, keeps the entry, and delivers once it is back on', async () => {
    const { messageId, reference } = await failed('payout');
    mode = 'ok';
    const disabled = { ...merchant, endpoints: [{ ...merchant.endpoints[0]!, enabled: false }] };
    await harness.setMerchants([disabled]);
    try {
      // The API hears the change (NOTIFY): a reference with nothing failed answers 404 until it does.
      await waitFor('replica sees the webhook disabled', async () => {
        return (await call(one, `${RESEND}?reference=nothing-failed`, { headers: await headers() })).status === 409;
      }, 10_000, 200);
      const answer = await call(one, `${RESEND}?reference=${reference}`, { headers: await headers() });
      expect(answer.body).toEqual({
        message: 'Webhooks are not enabled for this merchant; enable them on the dashboard, then resend',
        error: { code: 'webhook_disabled', status: 409 },
        data: null,
      });
      expect(await unresolved(one, merchant.id, reference)).toBe(1);
    } finally {
      await harness.setMerchants([merchant]);
    }
    await waitFor('replica sees the webhook enabled', async () => {
      return (await call(one, `${RESEND}?reference=nothing-failed`, { headers: await headers() })).status === 404;
    }, 10_000, 200);
    expect((await call(one, `${RESEND}?reference=${reference}`, { headers: await headers() })).status).toBe(200);
    await deliveriesOf(messageId);
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === messageId)).toHaveLength(2);
  });

  it('answers 409 event_not_subscribed for an event the webhook no longer receives, keeps the entry, and sends nothing', async () => {
    const { messageId, reference } = await failed('payout');
    mode = 'ok';
    // A replica started on the merchant's new settings: its webhook now receives charges only.
    const filtered = { ...merchant, endpoints: [{ ...merchant.endpoints[0]!, events: ['charge.completed' as const] }] };
    await harness.setMerchants([filtered]);
    const three = await startTestApi(harness.prefix);
    try {
      const answer = await call(three, `${RESEND}?reference=${reference}`, { headers: await headers() });
      expect(answer.status).toBe(409);
      expect(answer.body).toEqual({
        message: 'The webhook no longer receives payout events; add them to its events on the dashboard, then resend',
        error: { code: 'event_not_subscribed', status: 409 },
        data: null,
      });
      // The failure stays failed and free: resendable once the merchant opts back in.
      expect(await harness.database.query('SELECT claim_id FROM failed_webhooks WHERE webhook_id = $1', [messageId])).toEqual([{ claim_id: null }]);
      expect(await unresolved(three, merchant.id, reference)).toBe(1);
      expect(await harness.test.messageCount(harness.names.dispatch)).toBe(0);
    } finally {
      await three.stop();
      await harness.setMerchants([merchant]);
    }
    // Refused (409, nothing sent) until the replica hears that the webhook receives payouts again.
    await waitFor('resent once the replica hears the events back', async () => (await call(one, `${RESEND}?reference=${reference}`, { headers: await headers() })).status === 200, 10_000, 200);
    expect(await deliveriesOf(messageId)).toBe(2);
  });

  it('writes nothing to the failed stream but failures: claims and resends are rows', async () => {
    const entries = await harness.test.readStream(harness.names.failed, 1);
    expect(new Set(entries.map((e) => e.properties.headers?.[HEADERS.entryType]))).toEqual(new Set([ENTRY_TYPES.failure]));
  });

  it('gives only answers the OpenAPI document describes', () => {
    const statuses = expectDocumented(seen);
    expect(statuses).toContain('/nucleus/tnx/webhook 409');
  });
});
