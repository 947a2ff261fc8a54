/**
 * Scenario `cluster`: dispatch throughput on a three-node RabbitMQ cluster with one dispatcher and
 * with two sharing `dispatch` as competing consumers, same events, same receiver, rounds
 * alternating. The cluster is the one the cluster tests use (test/cluster/cluster.sh, as root).
 */
import { execFileSync } from 'node:child_process';
import { coresDuring } from './cpu.js';
import { benchPrefix, deleteTopology, fillDispatch, withDatabase } from './fixtures.js';
import { type ProgramProcess, type ReceiverProcess, until } from './processes.js';
import { startBenchDispatcher } from './throughput.js';

const SCRIPT = 'test/cluster/cluster.sh';

export function clusterAvailable(): boolean {
  try {
    execFileSync('sh', ['-c', 'command -v rabbitmq-server'], { stdio: 'ignore' });
    return process.getuid?.() === 0;
  } catch {
    return false;
  }
}

export function startCluster(): string[] {
  execFileSync(SCRIPT, ['start'], { stdio: 'inherit', timeout: 300_000 });
  return execFileSync(SCRIPT, ['urls']).toString().trim().split(',');
}

export function stopCluster(): void {
  execFileSync(SCRIPT, ['stop'], { stdio: 'inherit', timeout: 60_000 });
}

function nodePids(): Record<string, number | undefined> {
  return Object.fromEntries(
    [1, 2, 3].map((i) => {
      try {
        return [`node${i}`, Number(execFileSync(SCRIPT, ['pid', String(i)]).toString().trim())];
      } catch {
        return [`node${i}`, undefined];
      }
    }),
  );
}

/** `dispatchers` processes draining `total` events from a cluster's dispatch, with the cores each used. */
export function clusterThroughput(
  urls: string[],
  receiver: ReceiverProcess,
  total: number,
  dispatchers: number,
  concurrency: number,
): Promise<{ rate: number; cores: Record<string, number> }> {
  // The merchant, in a database of the run's own.
  return withDatabase(`cluster${dispatchers}`, async (databaseUrl) => {
    const prefix = benchPrefix(`cluster${dispatchers}`);
    await fillDispatch(urls[0]!, prefix, total, () => 'm_bench');
    await receiver.reset();
    const programs: ProgramProcess[] = [];
    for (let i = 0; i < dispatchers; i++) {
      // First attempts only (the receiver answers 204 to all): no retry schedule.
      programs.push(await startBenchDispatcher(urls.join(','), prefix, receiver, concurrency, databaseUrl, { RETRY_SCHEDULE: '' }));
    }
    let cores: Record<string, number> = {};
    try {
      await until('first delivery', async () => (await receiver.stats()).count > 0, 60_000, 10);
      const pids = Object.fromEntries(programs.map((p, i) => [`dispatcher${i + 1}`, p.child.pid]));
      ({ cores } = await coresDuring({ ...pids, receiver: receiver.pid, ...nodePids() }, () =>
        until('all deliveries', async () => (await receiver.stats()).count >= total, 300_000, 50),
      ));
    } finally {
      await Promise.all(programs.map((p) => p.stop()));
    }
    const stats = await receiver.stats();
    await deleteTopology(urls[0]!, prefix);
    return { rate: total / ((stats.last - stats.first) / 1000), cores };
  });
}
