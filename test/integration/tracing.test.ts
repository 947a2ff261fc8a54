import type { ApiProgram } from '../../apps/api/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { context, trace } from '@opentelemetry/api';
import type { Merchant } from '../../libs/merchants/index.js';
import { inSpan, startTracing, type Tracing } from '../../libs/tracing/index.js';
import { call, startTestApi, token, unresolved } from '../support/api.js';
import { capturingLogger } from '../support/capturing-logger.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { KIND, OtlpReceiver, type ReceivedSpan, testTracingSettings } from '../support/otlp-receiver.js';
import { failOnceThenSucceed, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { eventOf } from '../support/order.js';
import { openPostgres } from '../../libs/delivery-store/index.js';
import { IntakeChecker, IntakeKeyStore } from '../../libs/intake-keys/index.js';
import { silentLogger } from '../../libs/logger/index.js';

/**
 * Tracing end to end with a real OTLP/HTTP receiver (decoding JSON and protobuf alike), the real
 * broker and a real merchant server: the typed publisher, the dispatcher, its retries and a resend
 * through the API all run in this process with the SDK started as the programs start it, once
 * with each protocol.
 */
describe.each(['http/json', 'http/protobuf'] as const)('tracing over %s', (protocol) => {
  let otlp: OtlpReceiver;
  let tracing: Tracing;

  beforeAll(async () => {
    otlp = await OtlpReceiver.start();
    tracing = await startTracing({ ...testTracingSettings(otlp.url, protocol), serviceName: 'tracing-test' });
  });

  afterAll(async () => {
    await tracing?.shutdown(2_000);
    await otlp?.close();
  });

  /** The spans received so far that match, once at least `count` of them are in (flushing the SDK while it waits). */
  async function spansWhere(what: string, match: (span: ReceivedSpan) => boolean, count = 1): Promise<ReceivedSpan[]> {
    return waitFor(
      what,
      async () => {
        await tracing.flush();
        const found = otlp.spans.filter(match);
        return found.length >= count && found;
      },
      15_000,
      100,
    );
  }

  /** Counts the calls of context.with entering a context that holds a span, until stop(). */
  function countContextEntries(): { stop(): number } {
    const original = context.with;
    let calls = 0;
    context.with = function (this: typeof context, ...args: Parameters<typeof original>) {
      // The batch processor enters a span-less context per export (to suppress the exporter's own tracing).
      if (trace.getSpan(args[0]) !== undefined) calls++;
      return original.apply(this, args);
    } as typeof original;
    return {
      stop() {
        context.with = original;
        return calls;
      },
    };
  }

  const traceparentOf = (header: unknown) => /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/.exec(String(header));

  describe('a webhook traced from its publish to the merchant', () => {
    let receiver: Receiver;
    let harness: Harness;
    let merchant: Merchant;
    const lines: Array<Record<string, unknown>> = [];

    beforeAll(async () => {
      receiver = await Receiver.start(failOnceThenSucceed());
      merchant = testMerchant('m_trace', `${receiver.url}?token=abc`);
      harness = await startHarness({ name: 'tracing', merchants: [merchant], retryDelaysMs: [300], deliveryLog: true, logger: capturingLogger(lines) });
    });

    afterAll(async () => {
      await harness?.close();
      await receiver?.close();
    });

    it('puts the publish, both deliveries with their HTTP attempts and the retry in one trace, and the merchant sees its traceparent on both requests', async () => {
      const sample = sampleEvent('charge.completed', merchant.id);
      const event = { ...sample, data: { ...sample.data, note: 'payload-marker-7c1d' } };
      const { messageId } = await harness.publisher.publish(event);
      // The dispatcher passes its spans by hand: it never enters a context, which would turn on
      // AsyncLocalStorage's hook on every promise of the process (BENCHMARKS.md section 14).
      const entered = countContextEntries();
      let requests: Awaited<ReturnType<typeof receiver.requests.filter>> = [];
      try {
        requests = await waitFor('two requests', () => {
          const seen = receiver.requests.filter((r) => r.headers['webhook-id'] === messageId);
          return seen.length === 2 && seen;
        });
      } finally {
        expect(entered.stop()).toBe(0);
      }

      const [publish] = await spansWhere('the publish span', (s) => s.name === `publish ${harness.names.events}` && s.attributes['webhook.id'] === messageId);
      expect(publish).toMatchObject({ kind: KIND.producer, service: 'tracing-test' });
      expect(publish!.attributes).toMatchObject({ 'messaging.system': 'rabbitmq', 'messaging.destination.name': harness.names.events, 'webhook.merchant_id': merchant.id, 'webhook.event': 'charge.completed' });
      const trace = publish!.traceId;

      const deliveries = await spansWhere('both delivery spans', (s) => s.traceId === trace && s.name === `process ${harness.names.dispatch}`, 2);
      const attempts = await spansWhere('both HTTP attempts', (s) => s.traceId === trace && s.kind === KIND.client, 2);
      const [move] = await spansWhere('the wait written', (s) => s.traceId === trace && s.name === 'publish webhook_waits');
      await spansWhere('both records', (s) => s.traceId === trace && s.name === `publish ${harness.names.deliveries}`, 2);

      deliveries.sort((a, b) => Number(a.startNs - b.startNs));
      attempts.sort((a, b) => Number(a.startNs - b.startNs));
      const [first, second] = deliveries as [ReceivedSpan, ReceivedSpan];
      expect(first).toMatchObject({ kind: KIND.consumer, parentSpanId: publish!.spanId });
      expect(first.attributes).toMatchObject({ 'webhook.id': messageId, 'webhook.merchant_id': merchant.id, 'webhook.event': 'charge.completed', 'webhook.attempt': 1, 'webhook.outcome': 'retrying' });
      // The retry's delivery continues from the wait that held it.
      expect(move!.parentSpanId).toBe(first.spanId);
      expect(second.parentSpanId).toBe(move!.spanId);
      expect(second.attributes).toMatchObject({ 'webhook.id': messageId, 'webhook.attempt': 2, 'webhook.outcome': 'delivered' });

      const url = receiver.url;
      expect(attempts.map((a) => [a.name, a.parentSpanId, a.attributes['http.response.status_code'], a.attributes['url.full'], a.attributes['server.address']])).toEqual([
        ['POST', first.spanId, 500, url, '127.0.0.1'],
        ['POST', second.spanId, 204, url, '127.0.0.1'],
      ]);
      expect(attempts[0]!.attributes['error.type']).toBe('500');

      // The dispatcher's log line about the failed attempt names the first delivery's span.
      const retried = lines.filter((l) => l.message === 'webhook attempt failed, retry scheduled' && l.merchantId === merchant.id);
      expect(retried.map((l) => [l.trace_id, l.span_id])).toContainEqual([trace, first.spanId]);

      // The merchant's requests carry the trace, each its own attempt's span.
      expect(requests.map((r) => traceparentOf(r.headers.traceparent)?.slice(1))).toEqual([
        [trace, attempts[0]!.spanId],
        [trace, attempts[1]!.spanId],
      ]);

      // Never a secret, a token, a signature or the payload.
      const text = JSON.stringify(otlp.inTrace(trace), (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v));
      expect(text).not.toContain(merchant.endpoints[0]!.secret);
      expect(text).not.toContain('token=abc');
      expect(text).not.toContain(requests[0]!.headers['webhook-signature'] as string);
      expect(text).not.toContain('payload-marker-7c1d');
    });

    it('continues the trace of an upstream client that set its own traceparent', async () => {
      const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
      const parentId = '00f067aa0ba902b7';
      const event = sampleEvent('payout', merchant.id);
      const id = `evt_upstream_${Date.now()}`;
      // As pika or rabbitmq-c would: the header set by the client, the body as upstream sends it.
      await harness.broker.publish(harness.names.events, 'payout', Buffer.from(JSON.stringify(event)), {
        persistent: true,
        contentType: 'application/json',
        messageId: id,
        headers: { traceparent: `00-${traceId}-${parentId}-01`, tracestate: 'vendor=upstream' },
      });
      const requests = await waitFor('two requests', () => {
        const seen = receiver.requests.filter((r) => r.headers['webhook-id'] === id);
        return seen.length === 2 && seen;
      });
      const [first] = await spansWhere('the first delivery span', (s) => s.attributes['webhook.id'] === id && s.attributes['webhook.attempt'] === 1 && s.kind === KIND.consumer);
      expect(first).toMatchObject({ traceId, parentSpanId: parentId });
      await spansWhere('the second delivery span', (s) => s.traceId === traceId && s.attributes['webhook.attempt'] === 2 && s.kind === KIND.consumer);
      for (const request of requests) {
        expect(traceparentOf(request.headers.traceparent)?.[1]).toBe(traceId);
        expect(request.headers.tracestate).toBe('vendor=upstream');
      }
    });

    it('drops a tracestate that came without a valid traceparent, on the retry as on the first attempt', async () => {
      for (const traceparent of [undefined, 'not-a-traceparent']) {
        const id = `evt_orphan_state_${traceparent ? 'bad' : 'none'}_${Date.now()}`;
        const event = sampleEvent('payout', merchant.id);
        await harness.broker.publish(harness.names.events, 'payout', Buffer.from(JSON.stringify(event)), {
          persistent: true,
          contentType: 'application/json',
          messageId: id,
          headers: { ...(traceparent ? { traceparent } : {}), tracestate: 'upstream=internal-value' },
        });
        const requests = await waitFor('two requests', () => {
          const seen = receiver.requests.filter((r) => r.headers['webhook-id'] === id);
          return seen.length === 2 && seen;
        });
        // W3C trace context: without a traceparent it continues, a tracestate is not the trace's.
        expect(requests.map((r) => r.headers.tracestate)).toEqual([undefined, undefined]);
      }
    });

    it('writes trace_id and span_id on every log line written inside a span, and none outside', async () => {
      const lines: Array<Record<string, unknown>> = [];
      const logger = capturingLogger(lines);
      let ids: { traceId: string; spanId: string } | undefined;
      await inSpan('work', {}, async (span) => {
        ids = span.spanContext();
        logger.info('inside');
        await new Promise((resolve) => setTimeout(resolve, 1));
        logger.warn('inside after an await');
      });
      logger.info('outside');
      expect(lines.map((l) => [l.message, l.trace_id, l.span_id])).toEqual([
        ['inside', ids!.traceId, ids!.spanId],
        ['inside after an await', ids!.traceId, ids!.spanId],
        ['outside', undefined, undefined],
      ]);
    });
  });

  describe('a resend traced', () => {
    let receiver: Receiver;
    let harness: Harness;
    let api: ApiProgram;
    let merchant: Merchant;
    let up = false;

    beforeAll(async () => {
      receiver = await Receiver.start(() => (up ? 200 : 503));
      merchant = testMerchant('m_resend_trace', receiver.url);
      harness = await startHarness({ name: 'tracingresend', merchants: [merchant] });
      api = await startTestApi(harness.prefix);
    });

    afterAll(async () => {
      await api?.stop();
      await harness?.close();
      await receiver?.close();
    });

    it("links the resend's span to the webhook's trace, its claim, republish and resolution are its children, and the resent attempt stays in the webhook's trace", async () => {
      const event = sampleEvent('charge.completed', merchant.id);
      const reference = String(event.data.tnxRef);
      const { messageId } = await harness.publisher.publish(event);
      await waitFor('the failure indexed', async () => (await unresolved(api, merchant.id, reference)) === 1, 15_000);
      const [publish] = await spansWhere('the publish span', (s) => s.kind === KIND.producer && s.attributes['webhook.id'] === messageId);
      const webhookTrace = publish!.traceId;
      const [toFailed] = await spansWhere('the move to failed', (s) => s.traceId === webhookTrace && s.name === `publish ${harness.names.failed}`);

      up = true;
      const answer = await call(api, `/nucleus/tnx/webhook?reference=${encodeURIComponent(reference)}`, {
        headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` },
      });
      expect(answer.status).toBe(200);
      await waitFor('the resent webhook delivered', () => receiver.requests.filter((r) => r.headers['webhook-id'] === messageId).length === 2);

      const [resend] = await spansWhere('the resend span', (s) => s.name === 'resend' && s.attributes['webhook.merchant_id'] === merchant.id);
      expect(resend!.traceId).not.toBe(webhookTrace);
      expect(resend!.links).toEqual([{ traceId: webhookTrace, spanId: toFailed!.spanId, attributes: { 'webhook.id': messageId } }]);
      const [server] = await spansWhere('the request span', (s) => s.spanId === resend!.parentSpanId);
      expect(server).toMatchObject({ kind: KIND.server, name: 'POST /nucleus/tnx/webhook', attributes: expect.objectContaining({ 'http.response.status_code': 200 }) });
      const children = await spansWhere('its claim, republish and resolution', (s) => s.parentSpanId === resend!.spanId, 3);
      expect(children.map((s) => s.name).sort()).toEqual(['claim failed_webhooks', `publish ${harness.names.dispatch}`, 'resolve failed_webhooks']);

      // The resent attempt is the webhook's: its trace, continued from the move to failed.
      const [resent] = await spansWhere('the resent delivery', (s) => s.kind === KIND.consumer && s.attributes['webhook.id'] === messageId && s.attributes['webhook.outcome'] === 'delivered');
      expect(resent).toMatchObject({ traceId: webhookTrace, parentSpanId: toFailed!.spanId });
      const last = receiver.requests.filter((r) => r.headers['webhook-id'] === messageId)[1]!;
      expect(traceparentOf(last.headers.traceparent)?.[1]).toBe(webhookTrace);
    });

    it("links no trace for a failure whose copy carried none (it failed while tracing was off): never the resend's own", async () => {
      // The failure indexed as a dispatcher without tracing writes it: its headers hold no traceparent.
      const { failures } = (harness.dispatcher as unknown as { deps: { failures: { record(f: { headers: Record<string, unknown> }): Promise<void> } } }).deps;
      const record = failures.record.bind(failures);
      failures.record = ({ headers: { traceparent: _dropped, ...headers }, ...failure }) => record({ ...failure, headers });
      up = false;
      const event = sampleEvent('charge.completed', merchant.id);
      const reference = String(event.data.tnxRef);
      const { messageId } = await harness.publisher.publish(event);
      await waitFor('the failure indexed', async () => (await unresolved(api, merchant.id, reference)) === 1, 15_000);
      up = true;
      const answer = await call(api, `/nucleus/tnx/webhook?reference=${encodeURIComponent(reference)}`, {
        headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` },
      });
      expect(answer.status).toBe(200);
      await waitFor('the resent webhook delivered', () => receiver.requests.filter((r) => r.headers['webhook-id'] === messageId).length === 2);
      const [resend] = await spansWhere('the resend span', (s) => s.name === 'resend' && s.attributes['webhook.reference'] === reference);
      expect(resend!.links).toEqual([]);
    });
  });

  describe('an ordered webhook traced', () => {
    let receiver: Receiver;
    let harness: Harness;
    let merchant: Merchant;
    const tries = new Map<string, number>();

    beforeAll(async () => {
      // The charge fails once: the refund of its reference waits ('ordered') until it is delivered.
      receiver = await Receiver.start((_n, req) => {
        const id = String(req.headers['webhook-id']);
        tries.set(id, (tries.get(id) ?? 0) + 1);
        return JSON.parse(req.body).event === 'charge.completed' && tries.get(id) === 1 ? 500 : 204;
      });
      merchant = testMerchant('m_order_trace', receiver.url);
      merchant.endpoints[0]!.orderByReference = true;
      harness = await startHarness({ name: 'tracingorder', merchants: [merchant], retryDelaysMs: [300] });
    });

    afterAll(async () => {
      await harness?.close();
      await receiver?.close();
    });

    it('keeps a webhook that waited for an earlier one of its reference in its trace: its hand-back continues from its wait', async () => {
      const stamp = Date.now();
      const [chargeId, refundId] = [`evt_ocharge_${stamp}`, `evt_orefund_${stamp}`];
      // An upstream client that does not trace: no traceparent, so the dispatcher starts each trace.
      for (const [id, event] of [[chargeId, eventOf('charge.completed', merchant.id, `TX-${stamp}`)], [refundId, eventOf('refund.completed', merchant.id, `TX-${stamp}`)]] as const) {
        await harness.broker.publish(harness.names.events, event.event, Buffer.from(JSON.stringify(event)), { persistent: true, contentType: 'application/json', messageId: id });
      }
      await waitFor('the refund delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === refundId), 15_000);
      const [ordered] = await spansWhere('the refund behind its charge', (s) => s.attributes['webhook.id'] === refundId && s.attributes['webhook.outcome'] === 'ordered');
      const [delivered] = await spansWhere('the refund delivered', (s) => s.attributes['webhook.id'] === refundId && s.attributes['webhook.outcome'] === 'delivered');
      expect(delivered!.traceId).toBe(ordered!.traceId);
      const [wait] = await spansWhere('its wait written', (s) => s.traceId === ordered!.traceId && s.name === 'publish webhook_waits');
      expect(wait).toMatchObject({ kind: KIND.producer, parentSpanId: ordered!.spanId, attributes: expect.objectContaining({ 'webhook.id': refundId }) });
      expect(delivered!.parentSpanId).toBe(wait!.spanId);
    });
  });

  describe('a repeat dropped at intake, traced', () => {
    let receiver: Receiver;
    let harness: Harness;
    let merchant: Merchant;
    let keys: IntakeChecker;
    let keysDb: ReturnType<typeof openPostgres>;

    beforeAll(async () => {
      receiver = await Receiver.start();
      merchant = testMerchant('m_repeat_trace', receiver.url);
      harness = await startHarness({ name: 'tracingrepeat', merchants: [merchant] });
      // INTAKE_DEDUPE_WINDOW's checker on the harness's database, as the program wires it.
      keysDb = openPostgres(harness.database.url, { maxConnections: 2 });
      keys = new IntakeChecker(new IntakeKeyStore(keysDb, 60_000), silentLogger());
      await keys.start();
      (harness.dispatcher as unknown as { deps: { intakeKeys?: IntakeChecker } }).deps.intakeKeys = keys;
    });

    afterAll(async () => {
      keys?.stop();
      await harness?.close();
      await keysDb?.close();
      await receiver?.close();
    });

    it("names the webhook on the span of a repeat it dropped, so a search by webhook.id finds it (an upstream client that does not trace)", async () => {
      const id = `evt_repeat_${Date.now()}`;
      const body = Buffer.from(JSON.stringify(sampleEvent('payout', merchant.id)));
      const publish = () => harness.broker.publish(harness.names.events, 'payout', body, { persistent: true, contentType: 'application/json', messageId: id });
      await publish();
      await waitFor('the first delivered', () => receiver.requests.some((r) => r.headers['webhook-id'] === id));
      await publish();
      const [repeat] = await spansWhere('the repeat dropped', (s) => s.kind === KIND.consumer && s.attributes['messaging.message.id'] === id && s.attributes['webhook.outcome'] === 'duplicate');
      expect(repeat!.attributes).toMatchObject({ 'webhook.id': id, 'webhook.merchant_id': merchant.id, 'webhook.event': 'payout' });
      expect(receiver.requests.filter((r) => r.headers['webhook-id'] === id)).toHaveLength(1);
    });
  });

  describe('a webhook through PostgreSQL trouble, traced', () => {
    let receiver: Receiver;
    let harness: Harness;
    let merchant: Merchant;
    const lines: Array<Record<string, unknown>> = [];

    beforeAll(async () => {
      receiver = await Receiver.start(() => 500);
      merchant = testMerchant('m_trouble_trace', receiver.url);
      harness = await startHarness({ name: 'tracingtrouble', merchants: [merchant], retryDelaysMs: [300], logger: capturingLogger(lines) });
    });

    afterAll(async () => {
      await harness?.close();
      await receiver?.close();
    });

    it("puts the webhook's trace_id on the warnings about it: a hand-back attempted untaken, a failure not indexed", async () => {
      // Its hand-back's take, then its failure's index, do not reach PostgreSQL.
      harness.waits.take = () => Promise.reject(new Error('connection terminated'));
      const { failures } = (harness.dispatcher as unknown as { deps: { failures: { record(): Promise<void> } } }).deps;
      failures.record = () => Promise.reject(new Error('connection terminated'));
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchant.id));
      const [publish] = await spansWhere('the publish span', (s) => s.kind === KIND.producer && s.attributes['webhook.id'] === messageId);
      const [failed] = await spansWhere('the failed delivery', (s) => s.attributes['webhook.id'] === messageId && s.attributes['webhook.outcome'] === 'failed');
      const warned = (message: string) => lines.filter((l) => l.message === message && l.webhookId === messageId).map((l) => l.trace_id);
      await waitFor('both warnings', () => warned('failure not indexed; the recorder indexes it from the delivery log').length > 0);
      expect(failed!.traceId).toBe(publish!.traceId);
      expect(warned('wait not taken: PostgreSQL did not answer; attempted anyway')).toEqual([publish!.traceId]);
      expect(warned('failure not indexed; the recorder indexes it from the delivery log')).toEqual([publish!.traceId]);
    });
  });

  describe('several merchants on one host, traced', () => {
    let receiver: Receiver;
    let harness: Harness;
    // Two merchants behind one URL, a third on another path of the same host: an endpoint's URL
    // attributes are encoded once per URL and shared, the merchant's own set per delivery.
    let merchants: Merchant[];

    beforeAll(async () => {
      receiver = await Receiver.start();
      merchants = [testMerchant('m_host_a', receiver.url), testMerchant('m_host_b', receiver.url), testMerchant('m_host_c', `${receiver.url}/c?k=v`)];
      harness = await startHarness({ name: 'tracinghost', merchants, settings: { concurrency: 16 } });
    });

    afterAll(async () => {
      await harness?.close();
      await receiver?.close();
    });

    it("keeps each webhook in its own trace with its own merchant's attributes, however the deliveries interleave", async () => {
      const events = Array.from({ length: 30 }, (_, i) => sampleEvent('payout', merchants[i % 3]!.id));
      const published = await Promise.all(events.map(async (event) => ({ merchantId: event.merchantId, ...(await harness.publisher.publish(event)) })));
      const requests = await waitFor('every webhook delivered', () => {
        const seen = receiver.requests.filter((r) => published.some((p) => p.messageId === r.headers['webhook-id']));
        return seen.length === published.length && seen;
      });
      const ids = new Set(published.map((p) => p.messageId));
      const deliveries = await spansWhere('every delivery span', (s) => s.kind === KIND.consumer && ids.has(String(s.attributes['webhook.id'])), published.length);
      const attempts = await spansWhere('every HTTP attempt', (s) => s.kind === KIND.client && deliveries.some((d) => d.spanId === s.parentSpanId), published.length);

      const traces = new Set<string>();
      for (const { messageId, merchantId } of published) {
        const delivery = deliveries.find((d) => d.attributes['webhook.id'] === messageId)!;
        expect(delivery.attributes).toMatchObject({ 'webhook.merchant_id': merchantId, 'webhook.outcome': 'delivered' });
        traces.add(delivery.traceId);
        const attempt = attempts.find((a) => a.parentSpanId === delivery.spanId)!;
        expect(attempt.traceId).toBe(delivery.traceId);
        expect(attempt.attributes['url.full']).toBe(merchantId === 'm_host_c' ? `${receiver.url}/c` : receiver.url);
        const request = requests.find((r) => r.headers['webhook-id'] === messageId)!;
        expect(traceparentOf(request.headers.traceparent)?.slice(1)).toEqual([delivery.traceId, attempt.spanId]);
      }
      expect(traces.size).toBe(published.length);
    });
  });
});
