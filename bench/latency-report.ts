/** The latency sections of BENCHMARKS.md: resend (2), isolation from a hanging merchant (4), end to end (5). */
import { benchIsolation } from './isolation.js';
import type { ReceiverProcess } from './processes.js';
import { benchResend } from './resend.js';
import { scanQueue } from './scan.js';
import { medianOf, url } from './settings.js';
import { round } from './stats.js';
import { steadyRun } from './steady.js';

/** `npm run bench -- resend`. */
export async function resendSection(): Promise<string> {
  const small = await medianOf('resend 1,000', () => benchResend(url, 1_000, 300));
  const large = await medianOf('resend 1,000,000', () => benchResend(url, 1_000_000, 300));
  const scan = await medianOf('scan 100,000', async () => ({ ms: await scanQueue(url, 100_000) }));
  return `## 2. Resend latency as the failure index grows

\`failed_webhooks\` in PostgreSQL holds N unresolved failures of the merchant (and N of another); the API
starts; then 300 sequential resends of distinct random references (after 30 untimed) are timed over
HTTP with undici's \`request\` on one kept-alive connection, from the API's own process. Each resend:
auth, the shared rate limit, one conditional UPDATE claiming the reference's failures, the republish
with its confirm, one UPDATE marking them resent.

| unresolved failures | API start ms | p50 ms | p99 ms |
|---|---|---|---|
| 1,000 | ${small.startMs} | ${small.p50Ms} | ${small.p99Ms} |
| 1,000,000 | ${large.startMs} | ${large.p50Ms} | ${large.p99Ms} |

Targets: p50 ≤ 20 ms, p99 ≤ 100 ms, flat from 1,000 (p99 at 1,000,000 ÷ p99 at 1,000: **${round(large.p99Ms / small.p99Ms)}x**).
Scanning a quorum queue of 100,000 for a reference's failed webhooks (the whole queue, since a
reference can have several entries; everything read is handed back): **${Math.round(scan.ms)} ms**, ${Math.round(scan.ms / large.p99Ms)}x the resend p99 at 1,000,000.
`;
}

/** `npm run bench -- isolation`. */
export async function isolationSection(receiver: ReceiverProcess, second: ReceiverProcess): Promise<string> {
  const rate = 500;
  const r = await medianOf('isolation', async () => {
    const { baseline, withHanging } = await benchIsolation(url, receiver, second, rate, 10);
    return { baseP50: baseline.p50, baseP99: baseline.p99, hangP50: withHanging.p50, hangP99: withHanging.p99 };
  });
  return `## 4. Isolation from a hanging merchant

${rate} events/s for 10 s after an untimed second; every tenth goes to a second merchant on another receiver process. Baseline: that
endpoint answers at once. Then: it never answers (\`DELIVERY_TIMEOUT_MS=2000\`). Publish-to-receipt
latency of the healthy merchant's webhooks:

| second merchant | healthy p50 ms | healthy p99 ms |
|---|---|---|
| answers | ${r.baseP50} | ${r.baseP99} |
| hangs | ${r.hangP50} | ${r.hangP99} |

Healthy p99 with a hanging merchant ÷ without: **${round(r.hangP99 / Math.max(1, r.baseP99))}x** (target ≤ 2x).
`;
}

/** `npm run bench -- latency`. */
export async function latencySection(receiver: ReceiverProcess): Promise<string> {
  const rate = 1_000;
  const r = await medianOf('end-to-end', async () => {
    const result = await steadyRun({
      url,
      rate,
      seconds: 10,
      merchants: [{ id: 'm_bench', url: `${receiver.url}/ok` }],
      merchantOf: () => 'm_bench',
      receivers: [receiver],
      expectDelivered: () => true,
    });
    return { p50: result.m_bench!.p50, p99: result.m_bench!.p99 };
  });
  return `## 5. End-to-end latency

A steady ${rate.toLocaleString('en')} events/s for 10 s (after an untimed second) through \`webhooks.events\` (publisher confirms) to the receiver:
publish-to-receipt **p50 ${r.p50} ms, p99 ${r.p99} ms**.
`;
}
