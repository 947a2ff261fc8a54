import { randomUUID } from 'node:crypto';
import { BrokerConnection, type Delivery } from '../../libs/broker/index.js';
import {
  decodeRecords,
  type DeliveryRecord,
  type DeliveryRecordInput,
  DeliveryRecorder,
  RecordNotConfirmedError,
  RecorderStoppedError,
} from '../../libs/delivery-log/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { waitFor } from '../support/wait.js';

function recordFor(webhookId: string, overrides: Partial<DeliveryRecordInput> = {}): DeliveryRecordInput {
  return {
    webhookId,
    merchantId: 'm_rec',
    event: 'charge.completed',
    references: [`ref-${webhookId}`],
    payload: JSON.stringify({ event: 'charge.completed', data: { tnxRef: `ref-${webhookId}` } }),
    firstSeenAt: new Date().toISOString(),
    outcome: 'delivered',
    attemptNumber: 1,
    attempt: { startedAt: new Date().toISOString(), durationMs: 3, httpStatus: 200, responseBody: 'ok' },
    ...overrides,
  };
}

/** Every record on the stream so far, in order, with how many stream messages held them. */
async function streamRecords(test: TestBroker, stream: string, atLeast: number): Promise<{ records: DeliveryRecord[]; messages: number }> {
  let records: DeliveryRecord[] = [];
  let messages = 0;
  await waitFor(`${atLeast} records in ${stream}`, async () => {
    const count = await test.messageCount(stream);
    if (count === 0) return false;
    const entries = await test.readStream(stream, count);
    records = entries.flatMap((entry) => decodeRecords(entry.content).records);
    messages = entries.length;
    return records.length >= atLeast;
  });
  return { records, messages };
}

describe('the delivery recorder (the writer the dispatcher calls)', () => {
  const prefix = uniquePrefix('delivery-recorder');
  const names = topologyNames(prefix);
  const work = `${prefix}.work`;
  let test: TestBroker;
  let broker: BrokerConnection;
  let recorder: DeliveryRecorder;

  beforeAll(async () => {
    test = await TestBroker.open();
    await test.channel.assertQueue(work, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    broker = new BrokerConnection({ url: brokerUrl(), name: 'delivery-recorder-test', logger: silentLogger() });
    await broker.open();
    recorder = new DeliveryRecorder(broker, silentLogger(), { prefix, maxRecords: 50 });
    await recorder.start();
  });

  afterAll(async () => {
    await recorder?.stop();
    await broker?.close();
    await test?.channel.deleteQueue(work).catch(() => {});
    await test?.deleteTopology(prefix);
    await test?.close();
  });

  it('acks each fake delivery only after its record is confirmed on the deliveries stream, several records per stream message', async () => {
    const total = 300;
    for (let i = 0; i < total; i++) await test.publishRaw(work, Buffer.from(`w${i}`), { messageId: `w${i}` });

    // The dispatcher's pattern: decide, record, and ack only once record() resolved.
    const acked: string[] = [];
    const recordedBeforeAck: boolean[] = [];
    const consumer = await broker.consume(work, {
      prefetch: 100,
      onMessage: (delivery: Delivery) => {
        const webhookId = String(delivery.message.properties.messageId);
        let confirmed = false;
        void recorder
          .record(recordFor(webhookId))
          .then(() => {
            confirmed = true;
          })
          .then(() => {
            recordedBeforeAck.push(confirmed);
            delivery.ack();
            acked.push(webhookId);
          });
      },
    });
    await waitFor('every delivery acked', () => acked.length === total, 20_000);
    await consumer.cancel();

    const { records, messages } = await streamRecords(test, names.deliveries, total);
    expect(recordedBeforeAck.every(Boolean)).toBe(true);
    expect(new Set(records.map((r) => r.webhookId))).toEqual(new Set(acked));
    expect(records).toHaveLength(total);
    // Batched: far fewer stream messages than records.
    expect(messages).toBeLessThanOrEqual(total / 5);
    expect(await test.messageCount(work)).toBe(0);
    // Each record carries an id of its own (what makes a republished one idempotent) and its time.
    expect(new Set(records.map((r) => r.id)).size).toBe(total);
    expect(records.every((r) => typeof r.at === 'string')).toBe(true);
  });

  it('keeps the id a caller gives, so a record sent again after a crash is the same record', async () => {
    const id = randomUUID();
    await recorder.record(recordFor('w-given-id', { id }));
    const { records } = await streamRecords(test, names.deliveries, 301);
    expect(records.find((r) => r.webhookId === 'w-given-id')?.id).toBe(id);
  });

  it('closes a stream message at 1 MiB of its bytes, escapes counted, not of the records\' characters', async () => {
    // Answers of control characters: each escapes to six bytes (\u0001), 384 KiB a record.
    const answer = '\u0001'.repeat(64 * 1024);
    const ids = Array.from({ length: 10 }, (_, i) => `w-escaped-${i}`);
    await Promise.all(ids.map((id) => recorder.record(recordFor(id, { attempt: { startedAt: new Date().toISOString(), durationMs: 3, httpStatus: 500, responseBody: answer } }))));
    await streamRecords(test, names.deliveries, 311);
    const entries = await test.readStream(names.deliveries, await test.messageCount(names.deliveries));
    const holding = entries.filter((entry) => decodeRecords(entry.content).records.some((r) => ids.includes(r.webhookId)));
    // Closed once past 1 MiB: at most one record over it (all ten in one 3.8 MiB message before).
    for (const entry of holding) expect(entry.content.length).toBeLessThan(1024 * 1024 + 400 * 1024);
    expect(holding.length).toBeGreaterThanOrEqual(3);
  });

  it('rejects the records of a batch the broker did not take, so their deliveries stay unacked', async () => {
    // In place of the stream, a queue that refuses every message (nacks each publish).
    const ch = await test.connection.createChannel();
    await ch.deleteQueue(names.deliveries);
    await ch.assertQueue(names.deliveries, { durable: true, arguments: { 'x-queue-type': 'classic', 'x-max-length': 0, 'x-overflow': 'reject-publish' } });
    await expect(recorder.record(recordFor('w-lost'))).rejects.toBeInstanceOf(RecordNotConfirmedError);
    // The stream declared again, records are confirmed again.
    await ch.deleteQueue(names.deliveries);
    await ch.close();
    await recorder.start();
    await expect(recorder.record(recordFor('w-after'))).resolves.toBeUndefined();
  });

  it('publishes what is batched when stopped, and refuses records after, stop being safe twice', async () => {
    const pending = [recorder.record(recordFor('w-last-1')), recorder.record(recordFor('w-last-2'))];
    await Promise.all([recorder.stop(), recorder.stop()]);
    await expect(Promise.all(pending)).resolves.toEqual([undefined, undefined]);
    await expect(recorder.record(recordFor('w-late'))).rejects.toBeInstanceOf(RecorderStoppedError);
    const { records } = await streamRecords(test, names.deliveries, 3);
    expect(records.map((r) => r.webhookId)).toEqual(expect.arrayContaining(['w-last-1', 'w-last-2']));
  });
});
