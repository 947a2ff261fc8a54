/**
 * The baseline the failed stream replaces: finding a reference's failed webhooks in a quorum
 * queue of N messages. A reference can have several entries (failed, resent, failed again), so a
 * resend must read the whole queue; everything read goes back when the channel closes.
 */
import { randomUUID } from 'node:crypto';
import amqp from 'amqplib';
import { HEADERS } from '../libs/contracts/index.js';
import { benchPrefix, deleteTopology, eventBody } from './fixtures.js';
import { until } from './processes.js';

export async function scanQueue(url: string, entries: number): Promise<number> {
  const prefix = benchPrefix('scan');
  const queue = `${prefix}.dispatch`;
  const connection = await amqp.connect(url, { noDelay: true });
  const channel = await connection.createConfirmChannel();
  await channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
  const target = randomUUID();
  const body = eventBody('m_bench');
  for (let i = 0; i < entries; i++) {
    const reference = i === entries - 1 ? target : randomUUID();
    if (!channel.sendToQueue(queue, body, { persistent: true, headers: { [HEADERS.reference]: reference } })) {
      await new Promise((resolve) => channel.once('drain', resolve));
    }
    if (i % 5_000 === 4_999) await channel.waitForConfirms();
  }
  await channel.waitForConfirms();

  const started = performance.now();
  const reader = await connection.createChannel();
  // The largest prefetch AMQP allows (a quorum queue caps "unlimited" at 2,000). Messages are
  // handed back with a multiple-nack every 50,000 so the window never fills; the requeued ones go
  // behind the unread part, so the scan ends when it has read N distinct messages.
  await reader.prefetch(65_535);
  let read = 0;
  let found = 0;
  await reader.consume(queue, (msg) => {
    if (!msg || read >= entries) return;
    read++;
    if (msg.properties.headers?.[HEADERS.reference] === target) found = performance.now();
    if (read % 50_000 === 0) reader.nack(msg, true, true);
  });
  await until('whole queue scanned', () => read >= entries && found > 0, 300_000, 5);
  await reader.close();
  const elapsed = found - started;
  await connection.close();
  await deleteTopology(url, prefix);
  return elapsed;
}
