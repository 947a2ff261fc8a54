import { sampleEvent } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { type Harness, startHarness, testSecret } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/** A long span (a minute): a webhook held by a circuit is sent only once it is over, far past the deadlines below. */
const SCHEDULE = Array.from({ length: 200 }, () => 300);

/**
 * An endpoint's circuit is its row, by the endpoint's id (docs/DESIGN.md, "Outgoing webhook"): what
 * one endpoint's circuit did at a URL holds no other endpoint that has that URL later, nor the same
 * endpoint once its row closed elsewhere. Seen failing with breakers kept by merchant and URL alone:
 * the URL's breaker stayed open after the row closed (the close named the endpoint's URL of the
 * moment, or nothing once it was deleted), and every webhook sent there was postponed until its
 * schedule's span ran out (a minute here; the default schedule's, many hours).
 */
describe("an endpoint's circuit when URLs change hands", () => {
  const down = new Set<string>();
  let receiver: Receiver;
  let harness: Harness;
  const merchants = new Map<string, Merchant>();

  beforeAll(async () => {
    receiver = await Receiver.start((_n, req) => (down.has(req.path) ? 500 : 204));
    harness = await startHarness({ name: 'circuit-urls', merchants: [], retryDelaysMs: SCHEDULE, settings: { breakerThreshold: 2, breakerCooldownMs: 1_000 } });
  });

  afterAll(async () => {
    await harness?.close();
    await receiver?.close();
  });

  const url = (path: string) => `${receiver.url}/${path}`;
  const at = (path: string) => receiver.requests.filter((r) => r.path === `/webhooks/${path}`);
  const ids = (path: string) => at(path).map((r) => String(r.headers['webhook-id']));

  /** Writes the merchant with these endpoints (id → path) and reloads the dispatcher's directory. */
  async function merchant(id: string, endpoints: Record<string, string>): Promise<void> {
    merchants.set(id, { id, publicKey: `pk_urls_${id}_0001`, endpoints: Object.entries(endpoints).map(([ep, path]) => ({ id: ep, url: url(path), enabled: true, secret: testSecret() })) });
    await harness.setMerchants([...merchants.values()]);
  }

  const publish = async (merchantId: string) => (await harness.publisher.publish(sampleEvent('payout', merchantId))).messageId;
  const rows = async (sql: string, merchantId: string) => (await harness.database.query(sql, [merchantId])).length;

  /** Fails the endpoint at `path` until its row opens. */
  async function openCircuit(merchantId: string, path: string): Promise<void> {
    down.add(`/webhooks/${path}`);
    for (let i = 0; i < 3; i++) await publish(merchantId);
    await waitFor('the circuit row is open', async () => (await rows('SELECT 1 FROM wait_circuits WHERE merchant_id = $1', merchantId)) === 1, 10_000);
  }

  it('sends at once to a new endpoint given the URL of a deleted one whose circuit was open', async () => {
    await merchant('m_taken', { ep_taken_old: 'taken/hook' });
    await openCircuit('m_taken', 'taken/hook');
    // Deleted: its waits fail (webhook-disabled) at the row's next probe, and the row closes.
    await merchant('m_taken', {});
    await waitFor("the deleted endpoint's waits and row are gone", async () =>
      (await rows('SELECT 1 FROM wait_circuits WHERE merchant_id = $1', 'm_taken')) === 0 &&
      (await rows('SELECT 1 FROM webhook_waits WHERE merchant_id = $1', 'm_taken')) === 0, 15_000);
    down.clear();
    await merchant('m_taken', { ep_taken_new: 'taken/hook' });
    const id = await publish('m_taken');
    await waitFor('the new endpoint gets it', () => ids('taken/hook').includes(id), 5_000);
  });

  it('sends at once to an endpoint moved back to its old URL once the row its failures there opened has closed', async () => {
    await merchant('m_back', { ep_back: 'back/one' });
    await openCircuit('m_back', 'back/one');
    // Moved while open: the row's probe goes to the new URL, is answered, and the row closes.
    await merchant('m_back', { ep_back: 'back/two' });
    await waitFor('the row closed through the new URL, every wait delivered', async () =>
      (await rows('SELECT 1 FROM wait_circuits WHERE merchant_id = $1', 'm_back')) === 0 &&
      (await rows('SELECT 1 FROM webhook_waits WHERE merchant_id = $1', 'm_back')) === 0, 15_000);
    down.clear();
    await merchant('m_back', { ep_back: 'back/one' });
    const id = await publish('m_back');
    await waitFor('the old URL gets it again', () => ids('back/one').includes(id), 5_000);
  });
});
