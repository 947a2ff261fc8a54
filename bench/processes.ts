import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { Mark } from './receiver-process.js';

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

export interface ReceiverProcess {
  url: string;
  pid: number | undefined;
  stats(): Promise<{ count: number; first: number; last: number; latencies: number[]; merchants: Record<string, number[]> }>;
  /** The count and the marks, without the latencies: cheap to poll. */
  count(): Promise<{ count: number; first: number; last: number; marks: Mark[]; failed: number }>;
  /** Reads `pid`'s CPU time at the receipt of each of these counts (see receiver-process.ts). */
  watch(pid: number, at: number[]): Promise<void>;
  reset(): Promise<void>;
  stop(): Promise<void>;
}

export async function startReceiver(): Promise<ReceiverProcess> {
  const child = fork(here('./receiver-process.js'), ['0'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const [message] = (await once(child, 'message')) as [{ port: number }];
  const base = `http://127.0.0.1:${message.port}`;
  return {
    url: base,
    pid: child.pid,
    async stats() {
      return (await (await fetch(`${base}/stats`)).json()) as Awaited<ReturnType<ReceiverProcess['stats']>>;
    },
    async count() {
      return (await (await fetch(`${base}/count`)).json()) as Awaited<ReturnType<ReceiverProcess['count']>>;
    },
    async watch(pid, at) {
      const res = await fetch(`${base}/watch`, { method: 'POST', body: JSON.stringify({ pid, at }) });
      if (!res.ok) throw new Error(`bench: the receiver cannot watch: ${await res.text()}`);
    },
    async reset() {
      await fetch(`${base}/reset`, { method: 'POST' });
    },
    async stop() {
      child.kill('SIGKILL');
      await once(child, 'exit');
    },
  };
}

export interface ProgramProcess {
  child: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

/**
 * Runs a built program (dist/apps/…, or another build's by absolute path) in its own process with `--cpu-prof` when BENCH_PROFILE is set,
 * and BENCH_NODE_ARGS' flags (`--perf-basic-prof`: Linux perf names its JavaScript frames; perf samples time on a core, where
 * --cpu-prof also counts time the thread waited for one, on a shared machine mostly under `writev`).
 */
export function startProgram(script: string, env: Record<string, string>): ProgramProcess {
  const args = [...(process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir=profiles'] : []), ...(process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean)];
  // An absolute path runs another build (an A/B against an earlier commit's dist).
  const child = fork(script.startsWith('/') ? script : here(`../apps/${script}`), [], {
    env: { PATH: process.env.PATH ?? '', ...env },
    execArgv: args,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  return {
    child,
    output: () => out,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await once(child, 'exit');
    },
  };
}

export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs: number, intervalMs = 20): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`bench: timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Peak and current resident set of a process, from the kernel (VmHWM is the high-water mark). */
export function rssOf(pid: number): { peakMb: number; nowMb: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN);
  return { peakMb: kb('VmHWM') / 1024, nowMb: kb('VmRSS') / 1024 };
}

/** A metric from a program's /metrics, summed over its series (one series: its value); undefined when absent or unreachable. */
export async function scrape(port: number, metric: string): Promise<number | undefined> {
  try {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    // `name{program="dispatcher"} value`: the registry labels every series with its program.
    const lines = text.split('\n').filter((l) => l.startsWith(`${metric} `) || l.startsWith(`${metric}{`));
    return lines.length === 0 ? undefined : lines.reduce((sum, l) => sum + Number(l.split(' ').at(-1)), 0);
  } catch {
    return undefined;
  }
}
