import type { BrokerConnection } from '../../libs/broker/index.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { FailedStore, NothingToResendError, ResendInProgressError, ResendService } from '../../libs/failed/index.js';
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
  const LEASE_MS = 600;
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

  it('sends each of 20 failures once when two replicas resend the reference and the first outlives the lease', async () => {
    const reference = `PO-LEASE-${Date.now()}`;
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const message = sampleEvent('payout', merchant.id);
      message.data.reference = reference;
      ids.push((await harness.publisher.publish(message)).messageId);
    }
    const open = async () =>
      Number((await harness.database.query<{ n: string }>('SELECT count(*) AS n FROM failed_webhooks WHERE resent_at IS NULL AND claim_id IS NULL'))[0]?.n);
    await waitFor('20 failures indexed', async () => (await open()) === 20, 30_000);
    ok = true;

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

    const started = (await harness.database.query<{ started: Date }>('SELECT now() AS started'))[0]!.started;
    const first = one.resend(merchant, reference);
    await waitFor('the 10th copy published, its confirm held', () => published === 10, 10_000);
    // PostgreSQL's clock, which times the lease: more than two leases since the claim.
    await waitFor(
      'two leases gone by',
      async () => (await harness.database.query<{ past: boolean }>(`SELECT now() > $1::timestamptz + make_interval(secs => $2::double precision / 1000 * 2) AS past`, [started, LEASE_MS]))[0]?.past === true,
      10_000,
    );
    await expect(two.resend(merchant, reference)).rejects.toBeInstanceOf(ResendInProgressError);
    release();
    await expect(first).resolves.toBe(20);
    await expect(two.resend(merchant, reference)).rejects.toBeInstanceOf(NothingToResendError);

    const deliveries = () => ids.map((id) => receiver.requests.filter((r) => r.headers['webhook-id'] === id).length);
    await waitFor('every copy delivered', () => deliveries().every((n) => n >= 2), 20_000);
    await waitFor('dispatch idle', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0, 10_000);
    // One failed attempt and one resent delivery each.
    expect(deliveries()).toEqual(ids.map(() => 2));
    const rows = await harness.database.query<{ resend_count: number; resent: boolean }>('SELECT resend_count, resent_at IS NOT NULL AS resent FROM failed_webhooks');
    expect(rows).toHaveLength(20);
    expect(rows.every((r) => r.resend_count === 1 && r.resent)).toBe(true);
  }, 90_000);
});
