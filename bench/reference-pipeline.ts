/**
 * The program a team would write instead of the dispatcher, run in its own process: consume from
 * the quorum queue at the dispatcher's prefetch, parse, sign with HMAC-SHA256 in the Standard
 * Webhooks format (node:crypto), POST with undici with the dispatcher's requests in flight to one
 * endpoint, ack each delivery. No validation, directory, breaker, retries, metrics or journal.
 * argv = RabbitMQ URL, queue, receiver URL, total, prefetch, in flight, secret. Sends the count
 * of deliveries acked when done, and exits when the bench sends it a message.
 */
import { createHmac } from 'node:crypto';
import amqp from 'amqplib';
import { Agent, request } from 'undici';

const [url, queue, target, totalText, prefetchText, inFlightText, secret] = process.argv.slice(2);
const total = Number(totalText);
const key = Buffer.from(secret!.replace(/^whsec_/, ''), 'base64');
const agent = new Agent({ connections: Number(inFlightText), keepAliveTimeout: 30_000 });

const connection = await amqp.connect(url!, { noDelay: true });
const channel = await connection.createChannel();
await channel.prefetch(Number(prefetchText));
let acked = 0;
const done = new Promise<void>((resolve) => {
  void channel.consume(queue!, (message) => {
    if (!message) return;
    void (async () => {
      const event = JSON.parse(message.content.toString('utf8')) as { event: string; data: unknown };
      const body = JSON.stringify({ event: event.event, data: event.data });
      const id = String(message.properties.messageId);
      const timestamp = String(Math.floor(Date.now() / 1000));
      const signature = `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
      const res = await request(`${target}/ok`, {
        method: 'POST',
        body,
        dispatcher: agent,
        headers: { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': signature },
      });
      await res.body.dump();
      channel.ack(message);
      if (++acked >= total) resolve();
    })();
  });
});
await done;
await channel.close();
await connection.close();
await agent.close();
process.send?.(acked);
// Alive until the bench has read this process's CPU time from /proc; then it says so (or leaves).
if (process.send) await new Promise((resolve) => { process.once('message', resolve); process.once('disconnect', resolve); });
process.exit(0);
