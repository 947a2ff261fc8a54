import { jest } from '@jest/globals';
import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import type { Database } from '../../libs/delivery-store/index.js';
import { EndpointSettings, MerchantSettings, type PgMerchantDirectory } from '../../libs/merchants/index.js';
import type { EventPublisher } from '../../libs/publisher/index.js';
import { WebhookSigner } from '../../libs/signing/index.js';
import { uniquePrefix } from '../support/broker.js';
import { idDigest } from '../../libs/merchants/rows.js';
import { type DirectoryDispatchers, startDirectoryDispatchers } from '../support/directory-dispatchers.js';
import { putWithEndpoint } from '../support/merchant-endpoints.js';
import type { ReceivedRequest, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const MINUTE = 60_000;
const POLICY = { allowHttp: true, allowPrivateTargets: true };
/** Every timer and clock but Date stays real: a host whose wall clock alone is off. */
const REAL_BUT_DATE = ['hrtime', 'nextTick', 'performance', 'queueMicrotask', 'setImmediate', 'clearImmediate', 'setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] as const;

/**
 * A replaced secret's grace and an endpoint's failing clock are times PostgreSQL stamped; each is
 * judged by PostgreSQL's clock, never by the clock of the host that reads it (an API replica, the
 * CLI, a dispatcher), which may run minutes off. Here PostgreSQL runs on this host, whose clock is
 * taken for PostgreSQL's; each other host is given a clock `skewMs` off it.
 */
describe("hosts whose clocks run minutes off PostgreSQL's", () => {
  const prefix = uniquePrefix('host-clocks');
  let setup: DirectoryDispatchers;
  let database: Database;
  let directory: PgMerchantDirectory;
  let endpoints: EndpointSettings;
  let receiver: Receiver;
  let dispatcher: DispatcherProgram;
  let publisher: EventPublisher;
  /** How far the dispatcher's host clock runs off PostgreSQL's. */
  let skewMs = 0;

  beforeAll(async () => {
    setup = await startDirectoryDispatchers({ prefix, name: 'host_clocks', answer: () => 204, env: { ENDPOINT_DISABLE_AFTER: '1h' }, dispatcher: { now: () => new Date(Date.now() + skewMs), merchantsPollMs: 200 } });
    ({ database, directory, endpoints, receiver, publisher } = setup);
    dispatcher = setup.dispatchers[0]!;
  });

  afterEach(() => {
    skewMs = 0;
    jest.useRealTimers();
  });

  afterAll(() => setup?.close());

  /** The merchant with one endpoint (a path of the receiver), held by the dispatcher: its id and first secret. */
  async function merchant(id: string): Promise<{ endpointId: string; secret: string }> {
    const created = await putWithEndpoint(new MerchantSettings(directory, POLICY), id, { publicKey: `pk_clocks_${id}_0001`, url: `${receiver.url}/${id}` });
    await waitFor(`the dispatcher holds ${id}`, () => dispatcher.merchants.byId(id)?.endpoints.length === 1, 5_000);
    return { endpointId: created.view.id, secret: created.secret };
  }

  /** Rotated, with the dispatcher holding the rotation. */
  async function rotate(id: string, endpointId: string, graceSeconds: number, with_ = endpoints): Promise<string | null> {
    const rotated = await with_.rotate(id, endpointId, graceSeconds);
    await waitFor(`the dispatcher holds ${id}'s rotation`, () => dispatcher.merchants.byId(id)?.endpoints[0]?.secret === rotated.secret, 5_000);
    return rotated.previousSecretExpiresAt;
  }

  async function deliver(id: string): Promise<ReceivedRequest> {
    const at = () => receiver.requests.find((r) => r.path === `/webhooks/${id}`);
    await publisher.publish(sampleEvent('payout', id));
    return waitFor(`a webhook at ${id}`, at, 10_000);
  }

  /** Whether `secret` signed the request (at its own webhook-timestamp: a skewed dispatcher's, which a receiver's tolerance would refuse). */
  function signedWith(secret: string, r: ReceivedRequest): boolean {
    const expected = new WebhookSigner().sign(secret, String(r.headers['webhook-id']), r.body, new Date(Number(r.headers['webhook-timestamp']) * 1000))['webhook-signature'];
    return String(r.headers['webhook-signature']).split(' ').includes(expected);
  }

  const secondsLeft = async (at: string) => Number((await database.query<{ left: number }>('SELECT extract(epoch FROM $1::timestamptz - now())::float8 AS left', [at])).rows[0]!.left);

  it("stamps a replaced secret's grace by PostgreSQL's clock on an API host whose clock runs 10 minutes behind: it signs for the grace asked", async () => {
    const { endpointId } = await merchant('m_api_behind');
    const behind = new EndpointSettings(new MerchantSettings(directory, POLICY, () => new Date(Date.now() - 10 * MINUTE)));
    const expiresAt = await rotate('m_api_behind', endpointId, 300, behind);
    // By the host's clock its grace ended 5 minutes before it began: the replaced secret signed nothing.
    const left = await secondsLeft(expiresAt!);
    expect(left).toBeGreaterThan(290);
    expect(left).toBeLessThanOrEqual(300);
  });

  it("stamps an operator's disable by PostgreSQL's clock on an API host whose clock runs 10 minutes behind", async () => {
    const { endpointId } = await merchant('m_disable_behind');
    const behind = new EndpointSettings(new MerchantSettings(directory, POLICY, () => new Date(Date.now() - 10 * MINUTE)));
    const { view } = await behind.patch('m_disable_behind', endpointId, { enabled: false });
    // The portal ends a session whose link was minted (by PostgreSQL's clock) before the disable:
    // stamped 10 minutes early, a link minted 5 minutes before it still opened one after it.
    expect(Math.abs(await secondsLeft(view.disabledAt!))).toBeLessThan(5);
  });

  it("keeps a replaced secret still in its grace by PostgreSQL's clock through a write made on a host whose clock runs 10 minutes ahead", async () => {
    const { endpointId } = await merchant('m_writer_ahead');
    await rotate('m_writer_ahead', endpointId, 300);
    // The next write of the merchant, from the CLI on a host 10 minutes ahead: it dropped the secret as ended.
    jest.useFakeTimers({ now: Date.now() + 10 * MINUTE, advanceTimers: true, doNotFake: [...REAL_BUT_DATE] });
    await endpoints.patch('m_writer_ahead', endpointId, { description: 'written from a host ahead' });
    // And shown still signing there (GET, the portal, the CLI's list): it was shown ended.
    const shown = new MerchantSettings(directory, POLICY).get('m_writer_ahead')?.endpoints[0]?.previousSecrets;
    jest.useRealTimers();
    expect(shown).toHaveLength(1);
    const { rows } = await database.query<{ kept: number }>(
      "SELECT jsonb_array_length(COALESCE(e->'previousSecrets', '[]'::jsonb)) AS kept FROM merchants m, jsonb_array_elements(m.endpoints) e WHERE m.id = $1",
      ['m_writer_ahead'],
    );
    expect(rows.map((row) => Number(row.kept))).toEqual([1]);
  });

  it("knows a merchant deleted 23 hours 55 minutes ago (PostgreSQL's clock) as deleted on a host whose clock runs 10 minutes ahead", async () => {
    // A delete's tombstone keeps the merchant's webhooks still queued dropped for a day, not parked as unknown.
    await database.query(
      `INSERT INTO merchant_tombstones (id_digest, version, deleted_at) VALUES ($1, 1, now() - interval '23 hours 55 minutes')`,
      [idDigest('m_buried')],
    );
    await directory.poll();
    jest.useFakeTimers({ now: Date.now() + 10 * MINUTE, advanceTimers: true, doNotFake: [...REAL_BUT_DATE] });
    const deleted = directory.deleted('m_buried');
    jest.useRealTimers();
    expect(deleted).toBe(true);
  });

  it('signs with a replaced secret through its grace on a dispatcher whose clock runs 10 minutes ahead', async () => {
    const { endpointId, secret } = await merchant('m_dispatcher_ahead');
    await rotate('m_dispatcher_ahead', endpointId, 300);
    skewMs = 10 * MINUTE;
    const request = await deliver('m_dispatcher_ahead');
    // A merchant still verifying with the replaced secret (its grace has 5 minutes to run) failed every webhook.
    expect(signedWith(secret, request)).toBe(true);
    expect(String(request.headers['webhook-signature']).split(' ')).toHaveLength(2);
  });

  it("signs with no replaced secret whose grace ended by PostgreSQL's clock on a dispatcher whose clock runs 10 minutes behind", async () => {
    const { endpointId, secret } = await merchant('m_dispatcher_behind');
    const expiresAt = await rotate('m_dispatcher_behind', endpointId, 1);
    await waitFor('the grace over', async () => (await secondsLeft(expiresAt!)) < 0, 5_000, 100);
    skewMs = -10 * MINUTE;
    const request = await deliver('m_dispatcher_behind');
    // A secret replaced (a leak, say) still signed for 10 minutes past its end.
    expect(signedWith(secret, request)).toBe(false);
    expect(String(request.headers['webhook-signature']).split(' ')).toHaveLength(1);
  });

  it("counts in webhooks_endpoints_failing a failing clock that runs by PostgreSQL's time, on a dispatcher whose clock runs 15 minutes ahead", async () => {
    const { endpointId } = await merchant('m_gauge');
    // A clock that started 2 minutes ago, its last failure a minute ago (PostgreSQL's time): it runs
    // (stale only after 12 minutes without a failure: a fifth of ENDPOINT_DISABLE_AFTER).
    await database.query(
      `INSERT INTO endpoint_health (merchant_id, endpoint_id, url, failing_since, last_failure_at) VALUES ($1, $2, $3, now() - interval '2 minutes', now() - interval '1 minute')`,
      ['m_gauge', endpointId, `${receiver.url}/m_gauge`],
    );
    await waitFor('the dispatcher holds the clock', () => dispatcher.merchants.byId('m_gauge')?.endpoints[0]?.failingSince !== undefined, 5_000);
    const failing = async () => {
      const text = await (await fetch(`http://127.0.0.1:${dispatcher.metricsPort}/metrics`)).text();
      return Number(/^webhooks_endpoints_failing(?:\{[^}]*\})? (\S+)$/m.exec(text)?.[1]);
    };
    expect(await failing()).toBe(1);
    skewMs = 15 * MINUTE;
    // By the host's clock the last failure was 16 minutes ago: stale, left out of the count.
    expect(await failing()).toBe(1);
  });
});
