import { rmSync } from 'node:fs';

export default async function globalTeardown(): Promise<void> {
  const container = (globalThis as Record<string, unknown>).__RABBITMQ_CONTAINER__ as { stop(): Promise<unknown> } | undefined;
  await container?.stop();
  // The run's temporary directory (global-setup.ts); a process still writing there is no reason to fail the run.
  const dir = process.env.TMPDIR;
  if (!dir || !/webhooks-tests-[^/]+$/.test(dir)) return;
  try {
    rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  } catch {
    // Left for the system's tmp cleaner.
  }
}
