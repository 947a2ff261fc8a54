import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** CPU seconds (user + system) a process has used so far, from /proc; undefined elsewhere. */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (!pid) return undefined;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // utime + stime, in clock ticks of 1/100 s
  } catch {
    return undefined;
  }
}

/** The local RabbitMQ node's process, when the broker runs on this machine. */
export function brokerPid(): number | undefined {
  try {
    const out = execFileSync('pgrep', ['-f', 'beam.smp.*rabbit'], { encoding: 'utf8' }).trim().split('\n')[0];
    return out ? Number(out) : undefined;
  } catch {
    return undefined;
  }
}

/** Measures how many cores each process used while `work` ran. */
export async function coresDuring<T>(pids: Record<string, number | undefined>, work: () => Promise<T>): Promise<{ result: T; cores: Record<string, number> }> {
  const before = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuSeconds(pid)]));
  const started = performance.now();
  const result = await work();
  const seconds = (performance.now() - started) / 1000;
  const cores: Record<string, number> = {};
  for (const [k, pid] of Object.entries(pids)) {
    const a = before[k];
    const b = cpuSeconds(pid);
    if (a !== undefined && b !== undefined) cores[k] = Math.round(((b - a) / seconds) * 100) / 100;
  }
  return { result, cores };
}
