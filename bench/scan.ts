/**
 * The baseline the failed stream replaces: finding one reference in a quorum queue of N messages
 * by consuming until it appears, the rest returned to the queue when the channel closes.
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
    const reference = i === Math.floor(entries / 2) ? target : randomUUID();
    if (!channel.sendToQueue(queue, body, { persistent: true, headers: { [HEADERS.reference]: reference } })) {
      await new Promise((resolve) => channel.once('drain', resolve));
    }
    if (i % 5_000 === 4_999) await channel.waitForConfirms();
  }
  await channel.waitForConfirms();

  const started = performance.now();
  const reader = await connection.createChannel();
  // The largest prefetch AMQP allows (a quorum queue caps "unlimited" at 2,000) and no nack while
  // scanning: everything read stays unacked and goes back when the channel closes, so the scan
  // never meets its own returns. The target sits at the middle, within the 65,535 window.
  await reader.prefetch(65_535);
  let found = 0;
  await reader.consume(queue, (msg) => {
    if (!msg || found) return;
    if (msg.properties.headers?.[HEADERS.reference] === target) found = performance.now();
  });
  await until('reference found by scanning', () => found > 0, 300_000, 5);
  await reader.close();
  const elapsed = found - started;
  await connection.close();
  await deleteTopology(url, prefix, 0);
  return elapsed;
}
