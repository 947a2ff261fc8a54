import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** utime + stime of a /proc stat line, in seconds (clock ticks of 1/100 s). */
function statSeconds(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(') ') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** CPU seconds (user + system) a process has used so far, from /proc; undefined elsewhere. */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (!pid) return undefined;
  try {
    return statSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/**
 * A process's CPU seconds split by thread: its main thread (the event loop, where the program's
 * own JavaScript runs) and every other thread together (V8's compiler and GC helpers, libuv's pool).
 */
export function threadCpuSeconds(pid: number | undefined): { main: number; others: number } | undefined {
  if (!pid) return undefined;
  try {
    let main = 0;
    let others = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      let seconds: number;
      try {
        seconds = statSeconds(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8'));
      } catch {
        continue; // a thread that ended between the listing and the read
      }
      if (Number(tid) === pid) main = seconds;
      else others += seconds;
    }
    return { main, others };
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
