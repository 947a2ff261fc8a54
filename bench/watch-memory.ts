/**
 * Issue 29: a million webhooks waiting in the retry tiers for a dead endpoint, two dispatchers
 * running; each one's start-up to ready and its peak resident memory. The waits are written to the
 * retries journal directly, as the dispatcher writes them (driving a million real deliveries into
 * the tiers takes too long on two shared cores); the retry watch, which is what holds them, reads
 * nothing else. Only the program's own interfaces are used (a built dispatcher process, the
 * journal's entries), so the same bench runs against the code before and after the change.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import amqp from 'amqplib';
import { BrokerConnection } from '../libs/broker/index.js';
import { HEADERS, JOURNAL_ENTRY_TYPES } from '../libs/contracts/index.js';
import { silentLogger } from '../libs/logger/index.js';
import { declareTopology, topologyNames } from '../libs/topology/index.js';
import { benchPrefix, deleteTopology, eventBody, merchantsFile } from './fixtures.js';
import { freePort, type ProgramProcess, rssOf, scrape, startProgram, until } from './processes.js';

/** The default schedule (5s,5m,30m,2h,5h,10h,10h): a dead endpoint's webhooks spend nearly all their time in the long tiers. */
const TIERS = 7;
const LONG_TIERS = [2, 3, 4, 5, 6];

export interface WatchMemoryResult {
  waiting: number;
  fillSeconds: number;
  dispatchers: Array<{ name: string; startupMs: number; from: string; peakRssMb: number; rssMb: number; watchBytes: number | undefined }>;
}

/** `waiting` waits, each a webhook's first in the journal (so with its body), spread over the long tiers. */
async function fillJournal(url: string, stream: string, names: ReturnType<typeof topologyNames>, waiting: number): Promise<void> {
  const connection = await amqp.connect(url);
  const channel = await connection.createConfirmChannel();
  const body = eventBody('m_dead');
  for (let i = 0; i < waiting; i++) {
    const tier = LONG_TIERS[i % LONG_TIERS.length]!;
    const headers = {
      [HEADERS.entryType]: JOURNAL_ENTRY_TYPES.scheduled,
      [HEADERS.scheduleId]: randomUUID(),
      [HEADERS.retryQueue]: names.retry(tier),
      [HEADERS.dueAt]: Date.now() + 7_200_000,
      [HEADERS.webhookId]: `evt_${randomUUID()}`,
      [HEADERS.merchantId]: 'm_dead',
      [HEADERS.attempts]: tier + 1,
      [HEADERS.copyId]: randomUUID(),
    };
    if (!channel.sendToQueue(stream, body, { contentType: 'application/json', headers })) await once(channel, 'drain');
    if (i % 10_000 === 9_999) await channel.waitForConfirms();
  }
  await channel.waitForConfirms();
  await connection.close();
}

export async function benchWatchMemory(url: string, waiting: number, runSeconds: number): Promise<WatchMemoryResult> {
  const prefix = benchPrefix('watch-memory');
  const names = topologyNames(prefix);
  const logger = silentLogger();
  const broker = new BrokerConnection({
    url,
    name: 'bench-watch-memory',
    logger,
    declare: (openChannel) =>
      declareTopology(openChannel, {
        prefix,
        retryDelaysMs: [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
        failedRetention: '1D',
        replication: { quorumGroupSize: 1, streamClusterSize: 1 },
      }),
  });
  await broker.open(10_000);
  const programs: ProgramProcess[] = [];
  try {
    const started = performance.now();
    await fillJournal(url, names.retries, names, waiting);
    const fillSeconds = (performance.now() - started) / 1000;
    const file = merchantsFile([{ id: 'm_dead', url: `http://127.0.0.1:${await freePort()}/down` }]);
    const start = async (name: string) => {
      const port = await freePort();
      const at = performance.now();
      const program = startProgram('dispatcher/main.js', {
        RABBITMQ_URL: url,
        TOPOLOGY_PREFIX: prefix,
        MERCHANTS_FILE: file,
        METRICS_PORT: String(port),
        ALLOW_PRIVATE_TARGETS: 'true',
        QUORUM_GROUP_SIZE: '1',
        STREAM_CLUSTER_SIZE: '1',
        FAILED_RETENTION: '1D',
        LOG_LEVEL: 'info',
      });
      programs.push(program);
      await until(`${name} consuming`, () => program.output().includes('dispatcher consuming') || program.child.exitCode !== null, 600_000, 50);
      if (program.child.exitCode !== null) throw new Error(`bench: ${name} exited: ${program.output().slice(-2_000)}`);
      const startupMs = performance.now() - at;
      const from = program.output().includes('restored from a snapshot') ? 'snapshot' : 'journal replay';
      return { name, program, port, startupMs, from };
    };
    // The first reads the whole journal and writes its snapshot; the second starts from it (if written).
    const first = await start('dispatcher 1');
    // A build that says when its snapshot is written (one of waits on disk is parts, then a last
    // message) is waited for until it says so; an earlier one until the stream holds anything.
    // The second starts anyway after 5 min.
    const snapshots = await amqp.connect(url);
    const probe = await snapshots.createChannel();
    const tells = first.program.output().includes('"onDisk"');
    const written = async () =>
      tells ? first.program.output().includes('retry watch snapshot written') : (await probe.checkQueue(names.retrySnapshots)).messageCount > 0;
    await until('a snapshot', written, 300_000, 500).catch(() => {});
    await snapshots.close();
    const second = await start('dispatcher 2');
    // Both running: checks every 5 s, snapshots as the journal grows.
    await new Promise((resolve) => setTimeout(resolve, runSeconds * 1000));
    const dispatchers = [];
    for (const d of [first, second]) {
      const rss = rssOf(d.program.child.pid!);
      dispatchers.push({
        name: d.name,
        startupMs: Math.round(d.startupMs),
        from: d.from,
        peakRssMb: Math.round(rss.peakMb),
        rssMb: Math.round(rss.nowMb),
        watchBytes: await scrape(d.port, 'webhooks_retry_watch_bytes'),
      });
    }
    return { waiting, fillSeconds: Math.round(fillSeconds), dispatchers };
  } finally {
    for (const program of programs) await program.stop().catch(() => {});
    await broker.close();
    await deleteTopology(url, prefix, TIERS);
  }
}
