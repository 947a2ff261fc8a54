import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { type DispatcherProgram, startDispatcher } from '../../apps/dispatcher/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { call, startTestApi, token } from '../support/api.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';
import { FrozenProxy } from '../support/frozen-proxy.js';

/** The value of one series in Prometheus text format, or undefined when absent. */
function series(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const match = /^[^{]+\{(.*)\} (\S+)$/.exec(line);
    if (!match) continue;
    const have = Object.fromEntries([...match[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(match[2]);
  }
  return undefined;
}

describe('Prometheus metrics', () => {
  const prefix = uniquePrefix('metrics');
  let ok: Receiver;
  let failing: Receiver;
  let slow: Receiver;
  let program: DispatcherProgram;
  let upstream: BrokerConnection;
  let database: TestDatabase | undefined;
  const good = testMerchant('m_metrics_ok', 'http://placeholder');
  const bad = testMerchant('m_metrics_bad', 'http://placeholder');
  const held = testMerchant('m_metrics_held', 'http://placeholder');

  beforeAll(async () => {
    ok = await Receiver.start();
    failing = await Receiver.start(() => 500);
    slow = await Receiver.start(() => ({ status: 204, delayMs: 2_000 }));
    good.endpoints[0]!.url = ok.url;
    bad.endpoints[0]!.url = failing.url;
    held.endpoints[0]!.url = slow.url;
    database = await createTestDatabase('metrics');
    await seedMerchants(database.url, [good, bad, held]);
    const config = loadDispatcherConfig({
      RABBITMQ_URL: brokerUrl(),
      TOPOLOGY_PREFIX: prefix,
      SECRETS_KEY: TEST_SECRETS_KEY,
      // The last step long: the fifth failure opens the circuit's row, and its wait is parked only
      // for what is left of the span, then attempted if the breaker has not heard of the row yet (a
      // loaded machine announced one 400 ms late).
      RETRY_SCHEDULE: '50ms,50ms,50ms,50ms,2s',
      DATABASE_URL: database.url,
      ALLOW_PRIVATE_TARGETS: 'true',
      METRICS_PORT: '0',
      FAILED_RETENTION: '1D', // as the test API declares it
    });
    program = await startDispatcher(config, silentLogger());
    upstream = new BrokerConnection({ url: brokerUrl(), name: 'test-metrics-upstream', logger: silentLogger() });
    await upstream.open(10_000);
  });

  afterAll(async () => {
    await upstream?.close();
    await program?.stop();
    await database?.drop();
    await Promise.all([ok?.close(), failing?.close(), slow?.close()]);
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
  });

  const scrape = async () => (await fetch(`http://127.0.0.1:${program.metricsPort}/metrics`)).text();

  it('shows from start-up, before any delivery, 0 for every series a dashboard panel reads, for each known label', async () => {
    const text = await scrape();
    expect(series(text, 'webhooks_waiting', { program: 'dispatcher' })).toBe(0);
    expect(series(text, 'webhooks_waits_overdue', { program: 'dispatcher' })).toBe(0);
    expect(series(text, 'webhooks_circuits_open', { program: 'dispatcher' })).toBe(0);
    expect(series(text, 'webhooks_dispatch_unacked', { program: 'dispatcher' })).toBe(0);
    expect(series(text, 'webhooks_endpoints_failing', { program: 'dispatcher' })).toBe(0);
    for (const reason of ['failing', 'manual']) {
      expect(series(text, 'webhooks_endpoints_disabled', { reason })).toBe(0);
      expect(series(text, 'webhooks_endpoints_disabled_total', { reason })).toBe(0);
    }
    for (const type of ['endpoint.disabled', 'endpoint.enabled', 'message.attempt.failing', 'message.attempt.exhausted', 'message.attempt.recovered']) {
      expect(series(text, 'webhooks_operational_events_total', { type })).toBe(0);
    }
    // The rates the other panels read: 0 on a quiet service, not "No data".
    for (const result of ['success', 'failure']) expect(series(text, 'webhooks_delivery_attempts_total', { result })).toBe(0);
    expect(series(text, 'webhooks_deliveries_total', { outcome: 'delivered', event: 'payout' })).toBe(0);
    expect(series(text, 'webhooks_failed_total', { reason: 'attempts-exhausted' })).toBe(0);
  });

  it('counts deliveries, attempts and their durations as webhooks are delivered', async () => {
    const before = await scrape();
    expect(series(before, 'webhooks_deliveries_total', { outcome: 'delivered', event: 'payout' }) ?? 0).toBe(0);
    const publisher = new EventPublisher(upstream, prefix);
    for (let i = 0; i < 3; i++) await publisher.publish(sampleEvent('payout', good.id));
    await ok.waitForRequests(3);
    await waitFor('delivered counted', async () => series(await scrape(), 'webhooks_deliveries_total', { outcome: 'delivered', event: 'payout' }) === 3);
    const text = await scrape();
    expect(series(text, 'webhooks_delivery_attempts_total', { result: 'success' })).toBe(3);
    expect(series(text, 'webhooks_delivery_duration_seconds_count', { event: 'payout', result: 'success' })).toBe(3);
    expect(series(text, 'webhooks_broker_connected', { program: 'dispatcher' })).toBe(1);
    expect(series(text, 'webhooks_queue_messages', { queue: `${prefix}.dispatch` })).toBe(0);
    expect(text).toContain('process_cpu_user_seconds_total');
  });

  it('shows retries, failures by reason and an open circuit for a failing merchant', async () => {
    await new EventPublisher(upstream, prefix).publish(sampleEvent('charge.completed', bad.id));
    await waitFor('failed counted', async () => series(await scrape(), 'webhooks_deliveries_total', { outcome: 'failed', event: 'charge.completed' }) === 1);
    const text = await scrape();
    expect(series(text, 'webhooks_deliveries_total', { outcome: 'retried', event: 'charge.completed' })).toBe(5);
    expect(series(text, 'webhooks_delivery_attempts_total', { result: 'failure' })).toBe(5);
    // The circuit opened after the 5th failure: the 6th attempt was not made, and not spent.
    expect(series(text, 'webhooks_failed_total', { reason: 'circuit-open' })).toBe(1);
    // Labelled by origin and merchant: a hook URL's path can hold a token.
    expect(series(text, 'webhooks_circuit_open', { endpoint: `${new URL(failing.url).origin} (${bad.id})` })).toBe(1);
    expect(series(text, 'webhooks_circuits_open', { program: 'dispatcher' })).toBe(1);
    // The webhook went to failed: one message.attempt.exhausted (and .failing on its 4th attempt), published confirmed.
    const published = await waitFor('exhausted published', async () => {
      const now = await scrape();
      return series(now, 'webhooks_operational_events_total', { type: 'message.attempt.exhausted' }) === 1 && now;
    });
    expect(series(published, 'webhooks_operational_events_total', { type: 'message.attempt.failing' })).toBe(1);
  });

  it('shows the messages a dispatcher holds unacked, which the ready count does not (the stalled alert reads both)', async () => {
    const publisher = new EventPublisher(upstream, prefix);
    for (let i = 0; i < 2; i++) await publisher.publish(sampleEvent('refund.completed', held.id));
    // Both held while their endpoint takes 2 s to answer: none ready in dispatch, two unacked.
    const holding = await waitFor('two held', async () => {
      const text = await scrape();
      return series(text, 'webhooks_dispatch_unacked', { program: 'dispatcher' }) === 2 && text;
    }, 10_000, 50);
    expect(series(holding, 'webhooks_queue_messages', { queue: `${prefix}.dispatch` })).toBe(0);
    await waitFor('both settled', async () => series(await scrape(), 'webhooks_dispatch_unacked', { program: 'dispatcher' }) === 0, 10_000);
    expect(slow.requests).toHaveLength(2);
  });

  it('answers liveness and readiness on the metrics port', async () => {
    expect((await fetch(`http://127.0.0.1:${program.metricsPort}/healthz`)).status).toBe(200);
    const ready = await fetch(`http://127.0.0.1:${program.metricsPort}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready' });
  });

  it('counts resend answers by status on the API', async () => {
    const api = await startTestApi(prefix, [], {}, { DATABASE_URL: database!.url });
    try {
      const headers = { 'x-auth-token': bad.publicKey, authorization: `Bearer ${await token(bad.id)}` };
      expect((await call(api, '/nucleus/tnx/webhook?reference=unknown', { headers })).status).toBe(404);
      // The resend of one webhook by id counts too.
      expect((await call(api, '/nucleus/webhooks/evt_unknown/resend', { method: 'POST', headers })).status).toBe(404);
      const text = await (await fetch(`http://127.0.0.1:${api.port}/metrics`)).text();
      expect(series(text, 'webhooks_resend_requests_total', { status: '404', program: 'api' })).toBe(2);
      expect(series(text, 'webhooks_broker_connected', { program: 'api' })).toBe(1);
    } finally {
      await api.stop();
    }
  });
});

describe('the waits gauges while PostgreSQL falls silent (a partition: its connections open, nothing answered)', () => {
  it("answer every scrape within seconds, NaN, not once the connection is given up (20 s): Prometheus's scrape times out at 10 s", async () => {
    const prefix = uniquePrefix('metrics-silent');
    const database = await createTestDatabase('metrics_silent');
    await seedMerchants(database.url, [testMerchant('m_metrics_silent', 'http://127.0.0.1:9/')]);
    const proxy = await FrozenProxy.start(database.url);
    const program = await startDispatcher(
      loadDispatcherConfig({
        RABBITMQ_URL: brokerUrl(),
        TOPOLOGY_PREFIX: prefix,
        SECRETS_KEY: TEST_SECRETS_KEY,
        RETRY_SCHEDULE: '1s',
        DATABASE_URL: proxy.url,
        ALLOW_PRIVATE_TARGETS: 'true',
        METRICS_PORT: '0',
      }),
      silentLogger(),
    );
    try {
      let slowest = 0;
      const waiting = async () => {
        const started = Date.now();
        const text = await (await fetch(`http://127.0.0.1:${program.metricsPort}/metrics`)).text();
        slowest = Math.max(slowest, Date.now() - started);
        return /^webhooks_waiting(?:\{[^}]*\})? (\S+)$/m.exec(text)?.[1];
      };
      await waitFor('the waits counted', async () => (await waiting()) === '0', 10_000);
      // The pool's connections stay open and silent (the scheduler keeps them busy); each scrape after the last count's second asks again.
      proxy.freezeOpen();
      slowest = 0;
      await waitFor('the waits shown unknown', async () => /^nan$/i.test((await waiting()) ?? ''), 40_000, 250);
      expect(slowest).toBeLessThan(5_000);
    } finally {
      proxy.cut();
      await program.stop();
      await proxy.close();
      await database.drop();
      const test = await TestBroker.open();
      await test.deleteTopology(prefix);
      await test.close();
    }
  }, 90_000);
});

describe('the queue depths while RabbitMQ falls silent (its connection open, nothing answered)', () => {
  it("answer every scrape within seconds, without the depths, not once the heartbeat gives the connection up (30 s): Prometheus's scrape times out at 10 s", async () => {
    const prefix = uniquePrefix('metrics-broker-silent');
    const database = await createTestDatabase('metrics_broker_silent');
    await seedMerchants(database.url, [testMerchant('m_metrics_broker_silent', 'http://127.0.0.1:9/')]);
    const proxy = await FrozenProxy.start(brokerUrl());
    const program = await startDispatcher(
      loadDispatcherConfig({
        RABBITMQ_URL: proxy.url,
        TOPOLOGY_PREFIX: prefix,
        DATABASE_URL: database.url,
        SECRETS_KEY: TEST_SECRETS_KEY,
        RETRY_SCHEDULE: '',
        ALLOW_PRIVATE_TARGETS: 'true',
        METRICS_PORT: '0',
      }),
      silentLogger(),
    );
    try {
      let slowest = 0;
      const dispatch = async () => {
        const started = Date.now();
        const text = await (await fetch(`http://127.0.0.1:${program.metricsPort}/metrics`, { signal: AbortSignal.timeout(10_000) } /* Prometheus's scrape timeout */)).text();
        slowest = Math.max(slowest, Date.now() - started);
        return { depth: series(text, 'webhooks_queue_messages', { queue: `${prefix}.dispatch` }), connected: series(text, 'webhooks_broker_connected', { program: 'dispatcher' }) };
      };
      expect((await dispatch()).depth).toBe(0);
      proxy.freezeOpen();
      slowest = 0;
      // Before the heartbeat gives the connection up it still counts as connected, and the depths' channel never opens;
      // each scrape after the last answer's second asks again.
      await waitFor('the depths left out', async () => {
        const shown = await dispatch();
        return shown.depth === undefined && shown.connected === 1;
      }, 20_000, 250);
      expect((await dispatch()).depth).toBeUndefined();
      expect(slowest).toBeLessThan(5_000);
      // Reconnected, the depths come back: the unanswered ask settled with its connection, and did not stay in the way.
      proxy.cut();
      await waitFor('the depths shown again', async () => (await dispatch()).depth === 0, 30_000, 250);
    } finally {
      proxy.cut();
      await program.stop();
      await proxy.close();
      await database.drop();
      const test = await TestBroker.open();
      await test.deleteTopology(prefix);
      await test.close();
    }
  }, 90_000);
});
