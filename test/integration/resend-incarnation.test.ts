import { randomUUID } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import type { ApiProgram } from '../../apps/api/program.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { call, startTestApi, token } from '../support/api.js';
import type { TestBroker } from '../support/broker.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Appends an entry no reader applies and answers its offset: the test lays out the stream so that
 * a failure lands at the offset it wants.
 */
async function appendFiller(test: TestBroker, stream: string): Promise<number> {
  const id = randomUUID();
  await test.publishRaw(stream, Buffer.from('{}'), { headers: { [HEADERS.entryType]: 'test-filler', 'x-test-filler': id } });
  const ch = await test.connection.createChannel();
  await ch.prefetch(1_000);
  let offset: number | undefined;
  const { consumerTag } = await ch.consume(
    stream,
    (msg: ConsumeMessage | null) => {
      if (!msg) return;
      if (msg.properties.headers?.['x-test-filler'] === id) offset = msg.properties.headers[HEADERS.streamOffset] as number;
      ch.ack(msg);
    },
    { noAck: false, arguments: { 'x-stream-offset': 'first' } },
  );
  try {
    return await waitFor(`filler ${id} read back from ${stream}`, () => offset, 10_000);
  } finally {
    await ch.cancel(consumerTag).catch(() => {});
    await ch.close().catch(() => {});
  }
}

/**
 * Issue 28, finding 2. Deleting `failed` (the README's way to empty it) starts its offsets again
 * at 0, so a failure after the deletion can sit at the offset of one resent before it. The resend
 * of the new one must still be delivered: the dispatcher must not take it for another copy of the
 * old resend, and no resolution meant for the old entry may resolve the new one.
 */
describe('a resend after the failed stream was deleted and declared again', () => {
  let mode: 'fail' | 'ok' = 'fail';
  let receiver: Receiver;
  let harness: Harness;
  let api: ApiProgram;
  let merchant: Merchant;

  beforeEach(async () => {
    mode = 'fail';
    receiver = await Receiver.start(() => (mode === 'fail' ? 500 : 200));
    merchant = testMerchant('m_incarnation', receiver.url);
    harness = await startHarness({ name: 'resend-incarnation', merchants: [merchant], retryDelaysMs: [] });
    api = await startTestApi(harness.prefix, harness.merchantsFile);
  });

  afterEach(async () => {
    await api?.stop();
    await harness?.close();
    await receiver?.close();
  });

  const headers = async () => ({ 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` });
  const deliveriesOf = (id: string) => receiver.requests.filter((r) => r.headers['webhook-id'] === id).length;
  const resend = async (reference: string) => (await call(api, `/nucleus/tnx/webhook?reference=${reference}`, { headers: await headers() })).status;

  async function failure(): Promise<{ message: ReturnType<typeof sampleEvent>; messageId: string; reference: string; offset: number }> {
    const message = sampleEvent('payout', merchant.id);
    const reference = String(message.data.reference);
    const { messageId } = await harness.publisher.publish(message);
    const [offset] = await waitFor(`failure of ${reference} indexed`, () => {
      const offsets = api.index.lookup(merchant.id, reference);
      return offsets.length === 1 && offsets;
    }, 15_000);
    return { message, messageId, reference, offset: offset! };
  }

  /**
   * A webhook fails and is resent; the operator deletes `failed`; another webhook fails and lands
   * at the offset the first one had in the deleted stream.
   */
  async function failAtTheSameOffsetAfterADeletion() {
    const failed = harness.names.failed;
    await waitFor('api ready', () => api.index.ready, 15_000);
    // Room before the first failure, so the new stream can be laid out up to the same offset.
    for (let i = 0; i < 5; i++) await appendFiller(harness.test, failed);
    const first = await failure();
    mode = 'ok';
    expect(await resend(first.reference)).toBe(200);
    await waitFor('first resend delivered', () => deliveriesOf(first.messageId) === 2, 10_000);

    mode = 'fail';
    await harness.test.channel.deleteQueue(failed);
    // The API declares it again when the broker cancels its reader, then reads it from its start.
    await waitFor('failed declared again', () => harness.test.messageCount(failed).then(() => true, () => false), 15_000);
    await waitFor('index ready on the new stream', async () => api.index.ready && (await call(api, '/readyz', { method: 'GET' })).status === 200, 15_000);
    let last = await appendFiller(harness.test, failed);
    while (last < first.offset - 1) last = await appendFiller(harness.test, failed);
    expect(last).toBe(first.offset - 1);

    const second = await failure();
    expect(second.offset).toBe(first.offset);
    expect(deliveriesOf(second.messageId)).toBe(1);
    return { first, second };
  }

  it('is delivered although its failure entry sits at the offset of one resent before the deletion', async () => {
    const { second } = await failAtTheSameOffsetAfterADeletion();
    mode = 'ok';
    expect(await resend(second.reference)).toBe(200);
    await waitFor('second resend delivered to the merchant', () => deliveriesOf(second.messageId) === 2, 15_000);
    expect(harness.dispatcher.stats.superseded).toBe(0);
  }, 90_000);

  it('stays resendable when a copy resent from the deleted stream reaches the dispatcher afterwards', async () => {
    const { first, second } = await failAtTheSameOffsetAfterADeletion();
    mode = 'ok';
    // A copy of the first webhook resent before the deletion and still in dispatch: the dispatcher
    // writes its resolution (offset of the old entry) to the new stream before delivering it.
    await harness.test.publishRaw(harness.names.dispatch, Buffer.from(JSON.stringify(first.message)), {
      messageId: first.messageId,
      contentType: 'application/json',
      headers: {
        [HEADERS.merchantId]: merchant.id,
        [HEADERS.webhookId]: first.messageId,
        [HEADERS.resentAt]: new Date().toISOString(),
        [HEADERS.resentFromOffset]: first.offset,
        [HEADERS.resentFromId]: randomUUID(),
        [HEADERS.copyId]: randomUUID(),
      },
    });
    await waitFor('the late copy delivered', () => deliveriesOf(first.messageId) === 3, 10_000);
    // The resend's claim lands after that resolution: it is decided with the resolution applied.
    expect(await resend(second.reference)).toBe(200);
    await waitFor('second resend delivered to the merchant', () => deliveriesOf(second.messageId) === 2, 15_000);
  }, 90_000);
});
