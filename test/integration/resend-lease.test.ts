import type { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { FailedStore, NothingToResendError, ResendInProgressError, ResendService, ResendStoppedError } from '../../libs/failed/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A resend of a reference with many failures may take longer than its claim's lease (a slow broker
 * confirm, here one held back by the test): its copies are marked as each is confirmed and its
 * claim renewed meanwhile, so a resend on another replica sends none of them again.
 */
describe('a resend longer than its lease', () => {
  // Renewed every third of it: two thirds go by without one only when PostgreSQL is held back.
  const LEASE_MS = 1_500;
  let ok = false;
  let receiver: Receiver;
  let harness: Harness;
  let database: Database;
  const merchant = testMerchant('m_lease', 'http://placeholder');

  beforeAll(async () => {
    receiver = await Receiver.start(() => (ok ? 200 : 500));
    merchant.endpoints[0]!.url = receiver.url;
    harness = await startHarness({ name: 'resendlease', merchants: [merchant], retryDelaysMs: [] });
    database = openPostgres(harness.database.url);
  });

  afterAll(async () => {
    await database?.close();
    await harness?.close();
    await receiver?.close();
  });

  /** 20 failures of one reference, indexed; from then on the receiver answers 200. */
  async function twentyFailures(): Promise<{ reference: string; ids: string[] }> {
    ok = false;
    const reference = `PO-LEASE-${Date.now()}`;
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const message = sampleEvent('payout', merchant.id);
      message.data.reference = reference;
      ids.push((await harness.publisher.publish(message)).messageId);
    }
    const open = async () =>
      Number((await harness.database.query<{ n: string }>('SELECT count(*) AS n FROM failed_webhooks WHERE webhook_id = ANY($1) AND resent_at IS NULL AND claim_id IS NULL', [ids]))[0]?.n);
    await waitFor('20 failures indexed', async () => (await open()) === 20, 30_000);
    ok = true;
    return { reference, ids };
  }

  /** PostgreSQL's clock, which times the lease: more than two leases since `started`. */
  const twoLeasesSince = (started: Date, leaseMs = LEASE_MS) =>
    waitFor(
      'two leases gone by',
      async () => (await harness.database.query<{ past: boolean }>(`SELECT now() > $1::timestamptz + make_interval(secs => $2::double precision / 1000 * 2) AS past`, [started, leaseMs]))[0]?.past === true,
      10_000,
    );
  const now = async () => (await harness.database.query<{ started: Date }>('SELECT now() AS started'))[0]!.started;
  const deliveriesOf = (ids: string[]) => ids.map((id) => receiver.requests.filter((r) => r.headers['webhook-id'] === id).length);

  it('sends each of 20 failures once when two replicas resend the reference and the first outlives the lease', async () => {
    const { reference, ids } = await twentyFailures();

    // Replica one's broker holds back the confirm of its 10th copy until the test lets it go.
    let published = 0;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const slow = {
      get isConnected() {
        return harness.broker.isConnected;
      },
      async sendToQueue(...args: Parameters<BrokerConnection['sendToQueue']>) {
        await harness.broker.sendToQueue(...args);
        if (++published === 10) await held;
      },
    } as unknown as BrokerConnection;
    const store = new FailedStore(database);
    // The confirm deadline is the default 5 s: the held confirm comes well within it.
    const one = new ResendService(slow, store, harness.prefix, silentLogger(), { leaseMs: LEASE_MS });
    const two = new ResendService(harness.broker, store, harness.prefix, silentLogger(), { leaseMs: LEASE_MS });

    const started = await now();
    const first = one.resend(merchant, reference);
    await waitFor('the 10th copy published, its confirm held', () => published === 10, 10_000);
    await twoLeasesSince(started);
    await expect(two.resend(merchant, reference)).rejects.toBeInstanceOf(ResendInProgressError);
    release();
    await expect(first).resolves.toBe(20);
    await expect(two.resend(merchant, reference)).rejects.toBeInstanceOf(NothingToResendError);

    const deliveries = () => deliveriesOf(ids);
    await waitFor('every copy delivered', () => deliveries().every((n) => n >= 2), 20_000);
    await waitFor('dispatch idle', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0, 10_000);
    // One failed attempt and one resent delivery each.
    expect(deliveries()).toEqual(ids.map(() => 2));
    const rows = await harness.database.query<{ resend_count: number; resent: boolean }>('SELECT resend_count, resent_at IS NOT NULL AS resent FROM failed_webhooks WHERE webhook_id = ANY($1)', [ids]);
    expect(rows).toHaveLength(20);
    expect(rows.every((r) => r.resend_count === 1 && r.resent)).toBe(true);
  }, 90_000);

  it('stops sending when no renewal of its claim has ended for two thirds of the lease (PostgreSQL slow, not refusing): the replica that claimed the rest sends them, each once', async () => {
    const { reference, ids } = await twentyFailures();
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let marked = 0;
    const inner = new FailedStore(database);
    // Replica one's renewals do not come back until the test lets them; its 5th mark is written, then held.
    const slow = Object.assign(Object.create(inner) as FailedStore, {
      renew: async (...args: Parameters<FailedStore['renew']>) => {
        await released;
        return inner.renew(...args);
      },
      markResent: async (...args: Parameters<FailedStore['markResent']>) => {
        await inner.markResent(...args);
        if (++marked === 5) await released;
      },
    });
    // Long enough for 5 copies to go out within its first two thirds on a loaded machine.
    const leaseMs = 3_000;
    const one = new ResendService(harness.broker, slow, harness.prefix, silentLogger(), { leaseMs });
    const two = new ResendService(harness.broker, inner, harness.prefix, silentLogger(), { leaseMs });

    const started = await now();
    const first = one.resend(merchant, reference).catch((err: unknown) => err);
    await waitFor('5 copies sent and marked', () => marked === 5, 10_000);
    await twoLeasesSince(started, leaseMs);
    // The rest's lease ran out: replica two takes and sends them.
    await expect(two.resend(merchant, reference)).resolves.toBe(15);
    release();
    const stopped = await first;
    expect(stopped).toBeInstanceOf(ResendStoppedError);
    expect((stopped as ResendStoppedError).sent).toBe(5);

    await waitFor('every copy delivered', () => deliveriesOf(ids).every((n) => n >= 2), 20_000);
    await waitFor('dispatch idle', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0, 10_000);
    // One failed attempt and one resent delivery each: the first replica sent none of the 15 again.
    expect(deliveriesOf(ids)).toEqual(ids.map(() => 2));
  }, 90_000);
});
