/** A raw HTTP client doing the dispatcher's HTTP work per request (sign, POST, read the status), no broker. */
import { Agent, request } from 'undici';
import { WebhookSigner } from '../libs/signing/index.js';
import { SECRET, eventBody } from './fixtures.js';

async function timed(total: number, concurrency: number, one: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) await one(next++);
    }),
  );
  return total / ((performance.now() - started) / 1000);
}

/** One realistic body built once; each request is signed with its own webhook-id, as deliveries are. */
function requests() {
  const body = `{"event":"charge.completed","data":${JSON.stringify(JSON.parse(eventBody('m_bench').toString()).data)}}`;
  const signer = new WebhookSigner();
  return (i: number) => ({ body, headers: { 'content-type': 'application/json', 'user-agent': 'bench', ...signer.sign(SECRET, `evt_${i}`, body) } });
}

export async function startReceiverClient(base: string, total: number, concurrency: number): Promise<number> {
  const dispatcher = new Agent({ connections: concurrency, pipelining: 1 });
  const next = requests();
  try {
    return await timed(total, concurrency, async (i) => {
      const res = await request(`${base}/ok`, { method: 'POST', ...next(i), dispatcher });
      await res.body.dump();
      if (res.statusCode !== 204) throw new Error(`receiver answered ${res.statusCode}`);
    });
  } finally {
    await dispatcher.close();
  }
}
