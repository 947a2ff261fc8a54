/**
 * @runs-quiet counts requests exactly with a 1 s wait lease and a 500 ms delivery timeout: beside the parallel files on a slow machine's CI an attempt timed out and was rightly sent again (13 requests for 12)
 */
import type { GetMessage } from 'amqplib';
import { copyHeaders, sampleEvent } from '../../libs/contracts/index.js';
import { WAIT_TAKE_LIMIT } from '../../libs/waits/index.js';
import { capturingLogger } from '../support/capturing-logger.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { type Behaviour, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * PostgreSQL refuses the end of a wait (here a trigger, as a constraint or an operator's rule
 * would): the row stays, and its lease hands it back again. A hand-back is a new message each time,
 * which dispatch's delivery limit never counts: each copy was parked in invalid (three a lease:
 * its park, the park of the park's failure, and the broker's dead-letter), or delivered again, for
 * ever. The row's takes bound it: past WAIT_TAKE_LIMIT it is parked once more and picked no more.
 * The take's lease is the wait lease here (the delivery timeout is half of it).
 */
// 1 s, not 400 ms: the delivery timeout (half) is what a stall of this process must stay under, or
// an answered attempt times out and is rightly sent again, past the exact counts asserted here (the
// requeue case counts its retries by what the dispatcher saw: a timed-out attempt apart).
const LEASE_MS = 1_000;

async function refuseWaitEnds(harness: Harness): Promise<void> {
  await harness.database.query(`CREATE FUNCTION refuse_wait_end() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'waits are kept' USING ERRCODE = 'check_violation'; END $$`);
  await harness.database.query('CREATE TRIGGER refuse_wait_end BEFORE DELETE ON webhook_waits FOR EACH ROW EXECUTE FUNCTION refuse_wait_end()');
}

async function waitRow(harness: Harness): Promise<{ pick_at: Date | null } | undefined> {
  return (await harness.database.query<{ pick_at: Date | null }>('SELECT pick_at FROM webhook_waits'))[0];
}

const codeOf = (message: GetMessage) => message.properties.headers?.['x-invalid-code'];

/**
 * Until the row is out of the pick, or its copies in invalid are past what a bound allows (three
 * times the limit: what the unbounded loop reaches in as many leases); then no hand-back for three leases more.
 */
async function settle(harness: Harness, tooMany: () => Promise<boolean>): Promise<void> {
  await waitFor('its wait out of the pick, or too many copies', async () => (await waitRow(harness))?.pick_at === null || (await tooMany()), 20 * LEASE_MS * WAIT_TAKE_LIMIT);
}

/**
 * A receiver answering `answer`, and a harness (`wait-end-refused-<name>`) delivering its merchant
 * there, with three attempts (`retries` + 1 when given) and the ends of its waits refused; both
 * closed after `test`. `logged`: the dispatcher's log lines, as it writes them.
 */
async function endsRefused(name: string, answer: Behaviour, test: (harness: Harness, receiver: Receiver, merchantId: string) => Promise<void>, options: { retries?: number; ordered?: boolean; logged?: Array<Record<string, unknown>> } = {}): Promise<void> {
  const receiver = await Receiver.start(answer);
  const merchant = testMerchant(`m_end_refused_${name.replaceAll('-', '_')}`, receiver.url);
  if (options.ordered) merchant.endpoints[0]!.orderByReference = true;
  const retryDelaysMs = Array.from({ length: options.retries ?? 2 }, () => 300);
  const harness = await startHarness({ name: `wait-end-refused-${name}`, merchants: [merchant], retryDelaysMs, waitLeaseMs: LEASE_MS, settings: { deliveryTimeoutMs: LEASE_MS / 2 }, ...(options.logged ? { logger: capturingLogger(options.logged) } : {}) });
  try {
    await refuseWaitEnds(harness);
    await test(harness, receiver, merchant.id);
  } finally {
    await harness.close();
    await receiver.close();
  }
}

// Side by side: each case has a harness of its own (endsRefused: prefix, database, receiver) and spends its
// time waiting out ten or more leases, so one after the other they took 35 s.
describe('a hand-back whose wait PostgreSQL refuses to end', () => {
  it.concurrent('is parked in invalid a bounded number of times, then its wait is picked no more (nothing lost: the row stays)', async () => {
    await endsRefused('park', () => 500, async (harness, receiver, merchantId) => {
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchantId));
      await waitFor('its retry waiting', async () => (await waitRow(harness)) !== undefined, 10_000);
      // Its hand-backs fail intake from now on (as after MAX_MESSAGE_BYTES was lowered): each is parked, too-large.
      (harness.dispatcher as unknown as { settings: { maxMessageBytes: number } }).settings.maxMessageBytes = 10;
      await settle(harness, async () => (await harness.test.messageCount(harness.names.invalid)) > 3 * WAIT_TAKE_LIMIT);
      const parked = await harness.test.drain(harness.names.invalid, 1);
      expect(parked.length).toBeLessThanOrEqual(WAIT_TAKE_LIMIT + 1);
      expect(parked.every((m) => m.properties.messageId === messageId)).toBe(true);
      // Each parked as what it is (its last take past the limit left the row out of the pick).
      expect(parked.map(codeOf)).toEqual(parked.map(() => 'too-large'));
      // Kept: the row PostgreSQL would not delete, and its copy in invalid with the bytes.
      expect(await waitRow(harness)).toEqual({ pick_at: null });
      expect(JSON.parse(parked.at(-1)!.content.toString('utf8'))).toMatchObject({ merchantId });
      const handed = harness.scheduler.stats.handed;
      await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS));
      expect(harness.scheduler.stats.handed).toBe(handed);
      expect(await harness.test.messageCount(harness.names.invalid)).toBe(0);
      expect(receiver.requests).toHaveLength(1);
    });
  }, 60_000);

  it.concurrent('is delivered again a bounded number of times, not every lease for ever', async () => {
    let answered = 0;
    await endsRefused('sent', () => (answered++ === 0 ? 500 : 204), async (harness, receiver, merchantId) => {
      const { messageId } = await harness.publisher.publish(sampleEvent('payout', merchantId));
      await settle(harness, async () => receiver.requests.length > 3 * WAIT_TAKE_LIMIT);
      // The first attempt, then at most one delivery a take.
      expect(receiver.requests.length).toBeLessThanOrEqual(1 + WAIT_TAKE_LIMIT);
      const parked = await harness.test.drain(harness.names.invalid, 1);
      expect(parked.every((m) => m.properties.messageId === messageId)).toBe(true);
      expect(codeOf(parked.at(-1)!)).toBe('wait-not-ended');
      const requests = receiver.requests.length;
      await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS));
      expect(receiver.requests).toHaveLength(requests);
    });
  }, 60_000);

  it.concurrent('of an ordered webhook is dropped as stale, not held unacked with every later copy of it', async () => {
    let answered = 0;
    await endsRefused('ordered', () => (answered++ === 0 ? 500 : 204), async (harness, receiver, merchantId) => {
      await harness.publisher.publish(sampleEvent('payout', merchantId));
      await receiver.waitForRequests(2, 10_000);
      // Its place ended with its delivery, its wait did not: each later hand-back is stale (its take
      // ended it), and was held unacked while its take was refused, one more each lease.
      await settle(harness, async () => harness.dispatcher.unacked >= 3);
      expect(harness.dispatcher.unacked).toBeLessThan(3);
      await waitFor('nothing held', () => harness.dispatcher.unacked === 0, 5 * LEASE_MS);
      expect(receiver.requests).toHaveLength(2);
      expect(await harness.test.messageCount(harness.names.invalid)).toBe(0);
    }, { ordered: true });
  }, 60_000);

  /**
   * The first attempt fails, its hand-backs are delivered (their ends refused) until the row is
   * spent; the rule mended but the row not deleted, its copy is moved back as `webhooks invalid
   * requeue` does; `onMove` is told the requests made before the move.
   */
  async function spentAndMovedBack(harness: Harness, merchantId: string, receiver: Receiver, onMove: (requests: number) => void): Promise<void> {
    await harness.publisher.publish(sampleEvent('payout', merchantId));
    await settle(harness, async () => false);
    // A copy handed on before the row was spent may still be on its way (a lease ran out while it was
    // sent): delivered after the trigger goes, it ended the row itself, and the copy moved back found
    // none (a request fewer than counted). The move waits for it.
    await waitFor('no copy on its way', async () => harness.dispatcher.unacked === 0 && (await harness.test.messageCount(harness.names.dispatch)) === 0, 10 * LEASE_MS);
    const parked = (await harness.test.drain(harness.names.invalid, 1)).at(-1)!;
    expect(codeOf(parked)).toBe('wait-not-ended');
    await harness.database.query('DROP TRIGGER refuse_wait_end ON webhook_waits');
    onMove(receiver.requests.length);
    await harness.test.publishRaw(harness.names.dispatch, parked.content, {
      messageId: parked.properties.messageId,
      contentType: 'application/json',
      headers: copyHeaders(parked.properties.headers, { from: 'parked', unpark: true, upstreamExchange: harness.names.events, dispatch: harness.names.dispatch }),
    });
  }

  // The row is the one copy: the copy moved back takes its spent row over, which hands back nothing meanwhile.
  it.concurrent('parked as wait-not-ended and moved back while its row stays: its failed attempt is retried on that row, then delivered once', async () => {
    let requeuedAt: number | undefined;
    const logged: Array<Record<string, unknown>> = [];
    await endsRefused('requeue', (n) => (n === 0 || n === requeuedAt ? 500 : 204), async (harness, receiver, merchantId) => {
      const { stats } = harness.dispatcher;
      const [retried, delivered] = [stats.retried, stats.delivered];
      let retriedAtMove = 0;
      await spentAndMovedBack(harness, merchantId, receiver, (n) => ((requeuedAt = n), (retriedAtMove = stats.retried)));
      await waitFor('its retry delivered and its wait ended', async () => receiver.requests.length > requeuedAt! + 1 && (await waitRow(harness)) === undefined, 10_000).catch(async (err: unknown) => {
        const rows = await harness.database.query('SELECT hand, attempt, pick_at, takes FROM webhook_waits');
        throw new Error(`${(err as Error).message}: requests ${receiver.requests.length - requeuedAt!} since the requeue, retried ${harness.dispatcher.stats.retried - retried}, rows ${JSON.stringify(rows)}`);
      });
      // Once: no hand-back of the row before it was taken over, none after its end.
      await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS));
      // Each request was one attempt with one outcome: delivered (its end refused, before the move) or retried.
      expect(receiver.requests.length).toBe(stats.delivered - delivered + stats.retried - retried);
      // Retried: its first attempt's 500, the moved-back copy's, and any attempt a stall of this
      // process timed out (its answer read past the delivery timeout: rightly sent again). Of the
      // two 500s each is retried, read as such or timed out; nothing else fails an attempt here.
      const failures = logged.filter((line) => line.message === 'webhook attempt failed, retry scheduled').map((line) => line.errorClass);
      expect(failures).toHaveLength(stats.retried - retried);
      expect(failures.filter((errorClass) => errorClass !== 'timeout')).toEqual(failures.filter((errorClass) => errorClass === 'http_500'));
      expect(failures.filter((errorClass) => errorClass === 'http_500').length).toBeLessThanOrEqual(2);
      expect(failures.length).toBeGreaterThanOrEqual(2);
      // Since the move: the moved-back copy, then one hand-back of the row for each retry written
      // on it, the last delivered; none of the spent row before it was taken over, none after its end.
      expect(receiver.requests.length - requeuedAt!).toBe(1 + stats.retried - retriedAtMove);
      expect(await harness.database.query('SELECT 1 FROM webhook_bodies')).toHaveLength(0);
      expect(await harness.test.messageCount(harness.names.invalid)).toBe(0);
      // Six attempts: two 500s and a stall or three (each a timed-out attempt) still end delivered.
    }, { retries: 5, logged });
  }, 60_000);

  it.concurrent('parked as wait-not-ended and moved back while its row stays: delivered, it ends that row (nothing left for an operator to delete)', async () => {
    let requeuedAt: number | undefined;
    await endsRefused('requeue-sent', (n) => (n === 0 ? 500 : 204), async (harness, receiver, merchantId) => {
      await spentAndMovedBack(harness, merchantId, receiver, (n) => (requeuedAt = n));
      await waitFor('its row ended', async () => (await waitRow(harness)) === undefined, 10_000).catch(async (err: unknown) => {
        const rows = await harness.database.query('SELECT hand, attempt, pick_at, takes FROM webhook_waits');
        throw new Error(`${(err as Error).message}: requests ${receiver.requests.length - requeuedAt!} since the requeue, rows ${JSON.stringify(rows)}`);
      });
      expect(receiver.requests).toHaveLength(requeuedAt! + 1);
      expect(await harness.database.query('SELECT 1 FROM webhook_bodies')).toHaveLength(0);
      expect(await harness.test.messageCount(harness.names.invalid)).toBe(0);
    }, { retries: 3 });
  }, 60_000);
});
