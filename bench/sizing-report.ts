/** The "Sizing" section of BENCHMARKS.md, from bench/sizing.ts and bench/sizing-memory.ts. */
import type { SizingResult } from './sizing.js';
import type { DirectoryMemoryResult } from './sizing-memory.js';

const mb = (bytes: number) => (Number.isNaN(bytes) ? 'not readable here' : `${(bytes / 1024 / 1024).toFixed(1)} MB`);
const perMillion = (bytes: number, webhooks: number) => (Number.isNaN(bytes) ? 'not readable here' : `${((bytes / webhooks) * 1_000_000 / 1024 / 1024 / 1024).toFixed(2)} GB`);

export function sizingSection(r: SizingResult): string {
  const names = Object.keys(r.connections).sort();
  const db = r.databaseBytes;
  const families = ['delivery_webhooks', 'delivery_records', 'failed_webhooks', 'webhook_waits', 'webhook_bodies', 'other'].filter((k) => db[k] !== undefined);
  return `## 15. Sizing: PostgreSQL connections and disk per webhook (issue 53)

The recorder, the dispatcher and the API as deployed (each its own process, merchants in PostgreSQL,
\`RETRY_SCHEDULE=1s,2s\`), then ${r.webhooks.toLocaleString('en')} webhooks published: 99 in 100 to a live merchant whose endpoint answers 204, except 500 to
the first attempt of 4 of them (204 to their retry), 1 in 100 to a dead merchant that always answers 500 (three attempts or
its open circuit, then \`failed\`); meanwhile 9 merchants read their log (\`GET /nucleus/webhooks?limit=100\`, 4 reads in flight each) for 20 s.
Settled in ${r.seconds.toFixed(0)} s: ${r.outcomes.delivered.toLocaleString('en')} delivered (${r.outcomes.retried.toLocaleString('en')} of them on a retry), ${r.outcomes.failed.toLocaleString('en')} failed.

Connections in \`pg_stat_activity\` by \`application_name\`, sampled every 50 ms: at rest (over 5 s, from 11 s after every
program was ready: past the 10 s a pool keeps an idle connection) and the most seen at once under that load.

| application_name | at rest | peak under load |
|---|---|---|
${names.map((n) => `| \`${n}\` | ${r.connections[n]!.rest} | ${r.connections[n]!.peak} |`).join('\n')}

Disk: what the ${r.webhooks.toLocaleString('en')} webhooks added (after a \`CHECKPOINT\`; \`pg_total_relation_size\`, tables with their
indexes and TOAST, partitions with their parent), and the same scaled ×${(1_000_000 / r.webhooks).toLocaleString('en')} to a million (scaled, not measured at a million).

| | for ${r.webhooks.toLocaleString('en')} webhooks | per million (scaled) |
|---|---|---|
${families.map((k) => `| PostgreSQL \`${k}\` | ${mb(db[k]!)} | ${perMillion(db[k]!, r.webhooks)} |`).join('\n')}
| **PostgreSQL, the whole database** | **${mb(db.database!)}** | **${perMillion(db.database!, r.webhooks)}** |
| RabbitMQ, the \`deliveries\` stream | ${mb(r.streamBytes.deliveries)} | ${perMillion(r.streamBytes.deliveries, r.webhooks)} |
| RabbitMQ, the \`failed\` stream | ${mb(r.streamBytes.failed)} | ${perMillion(r.streamBytes.failed, r.webhooks)} |

Command: \`npm run bench -- sizing\` (\`BENCH_SIZING_WEBHOOKS\`, default 100,000; one run). The streams are read from the
broker's data directory (\`BENCH_RABBITMQ_STREAM_DIR\`, default \`/var/lib/rabbitmq/mnesia/rabbit@localhost/stream\`).
`;
}

export function directoryMemorySection(r: DirectoryMemoryResult): string {
  const row = (name: string, m: DirectoryMemoryResult['api']) =>
    `| ${name} | ${m.empty.rssMb} | ${m.full.rssMb} | **${m.full.rssMb - m.empty.rssMb}** | ${m.empty.heapUsedMb} | ${m.full.heapUsedMb} | **${m.full.heapUsedMb - m.empty.heapUsedMb}** |`;
  return `## 16. Sizing: memory per ${r.merchants.toLocaleString('en')} merchants (issue 53)

The dispatcher and the API each hold the whole merchant directory. Each started as deployed (its own process,
\`DELIVERY_LOG=off\`) on an empty merchants table and on ${r.merchants.toLocaleString('en')} merchants (section 7b's rows: a URL, a public
key and a sealed secret each, a third with an events filter); resident memory and V8 heap used 5 s after \`/readyz\` 200.

| program | resident MB, empty | resident MB, ${r.merchants.toLocaleString('en')} | grows by | heap MB, empty | heap MB, ${r.merchants.toLocaleString('en')} | grows by |
|---|---|---|---|---|---|---|
${row('dispatcher', r.dispatcher)}
${row('API', r.api)}

Command: \`npm run bench -- sizing-memory\` (\`BENCH_MERCHANTS\`, default 100,000; one run).
`;
}
