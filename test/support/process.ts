import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { brokerUrl } from './broker.js';
import { TEST_SECRETS_KEY } from './merchant-rows.js';

export interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a built program (dist/) with its own environment (and working directory) and collects its output. */
export function startProgram(script: string, env: Record<string, string>, args: string[] = [], cwd?: string): {
  child: ChildProcess;
  output: { stdout: string; stderr: string };
  finished: Promise<Finished>;
} {
  const child = spawn(process.execPath, [script, ...args], {
    cwd,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = { stdout: '', stderr: '' };
  child.stdout!.on('data', (c: Buffer) => (output.stdout += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output.stderr += c.toString()));
  const finished = once(child, 'exit').then(([code]) => ({ code: code as number | null, ...output }));
  return { child, output, finished };
}

export async function runProgram(script: string, env: Record<string, string>, args: string[] = []): Promise<Finished> {
  return startProgram(script, env, args).finished;
}

/** The program's end, or undefined if it is still running after `ms` (the caller kills it). */
export async function finishedWithin(program: { finished: Promise<Finished> }, ms: number): Promise<Finished | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([program.finished, new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A built dispatcher's environment in a test: `prefix`'s topology on the test broker with
 * one-node queues and streams, merchants in the database at `databaseUrl` (sealed with
 * TEST_SECRETS_KEY: seedMerchants), private targets allowed (the local
 * receiver), no retries (a single attempt), info logs (its "dispatcher consuming" line says it is up).
 */
export function dispatcherEnv(prefix: string, databaseUrl: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    RABBITMQ_URL: brokerUrl(),
    TOPOLOGY_PREFIX: prefix,
    DATABASE_URL: databaseUrl,
    SECRETS_KEY: TEST_SECRETS_KEY,
    METRICS_PORT: '0',
    RETRY_SCHEDULE: '',
    ALLOW_PRIVATE_TARGETS: 'true',
    QUORUM_GROUP_SIZE: '1',
    STREAM_CLUSTER_SIZE: '1',
    LOG_LEVEL: 'info',
    ...extra,
  };
}
