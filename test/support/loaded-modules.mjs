// Preloaded with `node --import` by tests: when the process (or a worker thread, which inherits
// the preload) exits, writes the files of every CommonJS module it loaded (the OpenTelemetry
// packages are CommonJS) to LOADED_MODULES_FILE, or LOADED_MODULES_FILE.thread-<id> for a worker.
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isMainThread, threadId } from 'node:worker_threads';

const require = createRequire(import.meta.url);
process.on('exit', () => {
  const file = process.env.LOADED_MODULES_FILE;
  if (file) writeFileSync(isMainThread ? file : `${file}.thread-${threadId}`, Object.keys(require.cache).join('\n'));
});
