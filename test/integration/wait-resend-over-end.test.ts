import { HEADERS } from '../../libs/contracts/index.js';
import { WaitStore } from '../../libs/waits/index.js';
import { useTestDatabase } from '../support/postgres.js';

/**
 * A wait's last attempt fails: its failure is indexed (resendable at once), then its wait is ended.
 * A resend between the two (the end slow, or refused and tried again) whose copy fails its first
 * attempt writes its own wait on the same key: the insert kept the old row as a redelivered first
 * attempt must, and the old wait's end then deleted it, with the resend's retry in it, its copy acked.
 */
describe("a resend's wait written before the failed wait it follows is ended", () => {
  const postgres = useTestDatabase('wait_resend_over_end', { maxConnections: 3 });
  const merchantId = 'm_resend_over_end';
  const endpointId = 'ep_resend_over_end';
  const webhookId = 'evt_resend_over_end';
  const wait = (headers: Record<string, string | number>) => ({
    merchantId, webhookId, endpointId, hand: 0, attempt: 1, delayMs: 0, reason: 'retry' as const,
    content: Buffer.from('{}'), spanLeftMs: 3_600_000, headers: { [HEADERS.attempts]: 1, [HEADERS.webhookId]: webhookId, ...headers },
  });
  const row = async () => (await postgres.database.query<{ resent_at: string | null }>(
    `SELECT headers->>'${HEADERS.resentAt}' AS resent_at FROM webhook_waits WHERE webhook_id = $1`, [webhookId],
  )).rows;

  it("keeps the resend's wait: the old end matches its own hand only", async () => {
    const store = new WaitStore(postgres.database);
    await store.write([wait({})], []);
    const [handed] = (await store.pick(10, 60_000)).handed;
    expect(handed?.webhookId).toBe(webhookId);
    // Its last attempt failed and was indexed; the resend's copy fails its first attempt and waits.
    const resentAt = new Date().toISOString();
    await store.write([wait({ [HEADERS.resentAt]: resentAt, [HEADERS.resend]: 1 })], []);
    // Now the failed wait's end.
    await store.write([], [{ merchantId, webhookId, endpointId, hand: handed!.hand }]);
    expect(await row()).toEqual([{ resent_at: resentAt }]);
    // The resend's copy redelivered (its dispatcher lost the channel after writing) leaves its row as it is.
    const [again] = (await store.pick(10, 60_000)).handed;
    await store.write([wait({ [HEADERS.resentAt]: resentAt, [HEADERS.resend]: 1 })], []);
    expect((await store.pick(10, 60_000)).handed).toEqual([]);
    await store.write([], [{ merchantId, webhookId, endpointId, hand: again!.hand }]);
    expect(await row()).toEqual([]);
  });
});
