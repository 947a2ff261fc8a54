import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Plain JavaScript (with run-tmpdir.d.ts), as the global setups load it through Node, not Jest's resolver.
 *
 * Every temporary file a test or a program it starts makes (merchants files, events, browser
 * profiles, private PostgreSQL clusters) goes under one directory of the run: the test workers and
 * their children inherit TMPDIR, which os.tmpdir() and mkdtemp read. Open to all and sticky, as /tmp
 * is: PostgreSQL's and RabbitMQ's data directories are made there for the postgres and rabbitmq users.
 */
export function useRunTmpdir() {
  const dir = mkdtempSync(join(tmpdir(), 'webhooks-tests-'));
  chmodSync(dir, 0o1777);
  process.env.TMPDIR = dir;
}

/** Removes the run's directory; a process still writing there is no reason to fail the run. */
export function removeRunTmpdir() {
  const dir = process.env.TMPDIR;
  if (!dir || !/webhooks-tests-[^/]+$/.test(dir)) return;
  try {
    rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  } catch {
    // Left for the system's tmp cleaner.
  }
}
