import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import { type EventName, sampleEvent } from '../../libs/contracts/index.js';
import type { Database } from '../../libs/delivery-store/index.js';
import type { Endpoint, EndpointSettings, PgMerchantDirectory } from '../../libs/merchants/index.js';
import type { EventPublisher } from '../../libs/publisher/index.js';
import { uniquePrefix } from '../support/broker.js';
import { type DirectoryDispatchers, startDirectoryDispatchers } from '../support/directory-dispatchers.js';
import { testSecret } from '../support/harness.js';
import { type ReceivedRequest, type Receiver, verifies } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * An endpoint changed while one of its webhooks waits (as a row) for its next attempt: moved to
 * another URL, its secret replaced at once, deleted (and its URL taken by a new endpoint), no
 * longer receiving the event, turned off and on again. What the next attempt does is what the
 * endpoint is when it is made (docs/merchants.md, "Changes while webhooks are in flight").
 * Each endpoint is a path of one receiver; the one changed answers 500 to its first request, 204 after.
 */
describe('fan-out: an endpoint changed while its webhook waits for a retry', () => {
  const prefix = uniquePrefix('fanchg');
  let setup: DirectoryDispatchers;
  let database: Database;
  let directory: PgMerchantDirectory;
  let endpoints: EndpointSettings;
  let receiver: Receiver;
  let dispatcher: DispatcherProgram;
  let publisher: EventPublisher;
  const counts = new Map<string, number>();

  beforeAll(async () => {
    const answer = (_n: number, req: ReceivedRequest) => {
      const n = counts.get(req.path) ?? 0;
      counts.set(req.path, n + 1);
      // The endpoint the test changes fails its first request; the merchant's other one takes everything.
      return n === 0 && /\/(a|old)$/.test(req.path) ? 500 : 204;
    };
    // Long enough between attempts for the test to change the endpoint while the retry waits.
    setup = await startDirectoryDispatchers({ prefix, name: 'fan_out_changes', answer, env: { RETRY_SCHEDULE: '2s,2s', DELIVERY_TIMEOUT_MS: '3000' } });
    ({ database, directory, endpoints, receiver, publisher } = setup);
    dispatcher = setup.dispatchers[0]!;
  });

  afterAll(() => setup?.close());

  function endpoint(merchantId: string, name: string, settings: Partial<Endpoint> = {}): Endpoint {
    return { id: `ep_${merchantId}_${name}`, url: `${receiver.url}/${merchantId}/${name}`, enabled: true, secret: testSecret(), ...settings };
  }

  async function merchant(id: string, list: Endpoint[]): Promise<void> {
    await directory.update(id, () => ({ id, publicKey: `pk_fanchg_${id}_0001`, endpoints: list }));
    await waitFor(`the dispatcher knows ${id}`, () => dispatcher.merchants.byId(id)?.endpoints.length === list.length, 5_000);
  }

  const at = (merchantId: string, name: string) => receiver.requests.filter((r) => r.path === `/webhooks/${merchantId}/${name}`);
  const withId = (requests: ReceivedRequest[], id: string) => requests.filter((r) => r.headers['webhook-id'] === id);
  const publish = async (merchantId: string, event: EventName) => (await publisher.publish(sampleEvent(event, merchantId))).messageId;
  const failure = async (merchantId: string, webhookId: string) =>
    (await database.query<{ endpoint_id: string; reason: string }>('SELECT endpoint_id, reason FROM failed_webhooks WHERE merchant_id = $1 AND webhook_id = $2', [merchantId, webhookId])).rows;
  const waiting = async (merchantId: string, webhookId: string, endpointId: string) =>
    Number((await database.query<{ n: string }>('SELECT count(*) AS n FROM webhook_waits WHERE merchant_id = $1 AND webhook_id = $2 AND endpoint_id = $3', [merchantId, webhookId, endpointId])).rows[0]!.n);
  const firstFailed = async (merchantId: string, name: string, id: string) => {
    await waitFor('the first attempt failed', () => withId(at(merchantId, name), id).length === 1, 10_000);
    await waitFor('its retry waits as a row', async () => (await waiting(merchantId, id, `ep_${merchantId}_${name}`)) === 1, 10_000);
  };

  it('sends the retry to the URL the endpoint has then, signed with the secret it has then alone', async () => {
    const moving = endpoint('m_move', 'old');
    await merchant('m_move', [moving, endpoint('m_move', 'other')]);
    const id = await publish('m_move', 'payout');
    await firstFailed('m_move', 'old', id);
    await endpoints.patch('m_move', moving.id, { url: `${receiver.url}/m_move/new` });
    const { secret } = await endpoints.rotate('m_move', moving.id, 0);
    await waitFor('the dispatcher holds the change', () => dispatcher.merchants.byId('m_move')?.endpoints[0]?.secret === secret, 5_000);
    const [sent] = await waitFor('the retry at the new URL', () => withId(at('m_move', 'new'), id).length === 1 && withId(at('m_move', 'new'), id), 10_000);
    expect(withId(at('m_move', 'old'), id)).toHaveLength(1);
    expect(verifies(secret, sent!)).toBe(true);
    expect(verifies(moving.secret, sent!)).toBe(false);
  });

  it('fails the retry of a deleted endpoint (webhook-disabled), and sends nothing to a new endpoint given its URL', async () => {
    const gone = endpoint('m_gone', 'a');
    await merchant('m_gone', [gone, endpoint('m_gone', 'b')]);
    const id = await publish('m_gone', 'payout');
    await firstFailed('m_gone', 'a', id);
    await endpoints.delete('m_gone', gone.id);
    const created = await endpoints.create('m_gone', { url: gone.url, enabled: true });
    await waitFor('the dispatcher holds the change', () => dispatcher.merchants.byId('m_gone')?.endpoints.some((e) => e.id === created.view.id), 5_000);
    await waitFor('the retry failed', async () => (await failure('m_gone', id)).length === 1, 10_000);
    expect(await failure('m_gone', id)).toEqual([{ endpoint_id: gone.id, reason: 'webhook-disabled' }]);
    expect(withId(at('m_gone', 'a'), id)).toHaveLength(1);
  });

  it('fails the retry of an endpoint that no longer receives the event (event-not-subscribed)', async () => {
    const narrowed = endpoint('m_narrow', 'a');
    await merchant('m_narrow', [narrowed, endpoint('m_narrow', 'b')]);
    const id = await publish('m_narrow', 'payout');
    await firstFailed('m_narrow', 'a', id);
    await endpoints.patch('m_narrow', narrowed.id, { events: ['charge.completed'] });
    await waitFor('the dispatcher holds the change', () => dispatcher.merchants.byId('m_narrow')?.endpoints[0]?.events?.length === 1, 5_000);
    await waitFor('the retry failed', async () => (await failure('m_narrow', id)).length === 1, 10_000);
    expect(await failure('m_narrow', id)).toEqual([{ endpoint_id: narrowed.id, reason: 'event-not-subscribed' }]);
    expect(withId(at('m_narrow', 'a'), id)).toHaveLength(1);
  });

  it('delivers the retry of an endpoint turned off and on again before it was due', async () => {
    const flicker = endpoint('m_flick', 'a');
    await merchant('m_flick', [flicker, endpoint('m_flick', 'b')]);
    const id = await publish('m_flick', 'payout');
    await firstFailed('m_flick', 'a', id);
    await endpoints.patch('m_flick', flicker.id, { enabled: false });
    await endpoints.patch('m_flick', flicker.id, { enabled: true });
    await waitFor('the retry delivered', () => withId(at('m_flick', 'a'), id).length === 2, 10_000);
    expect(await failure('m_flick', id)).toEqual([]);
  });
});
