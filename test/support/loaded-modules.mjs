// Preloaded with `node --import` by tests: when the process exits, writes the files of every
// CommonJS module it loaded (the OpenTelemetry packages are CommonJS) to LOADED_MODULES_FILE.
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
process.on('exit', () => {
  if (process.env.LOADED_MODULES_FILE) writeFileSync(process.env.LOADED_MODULES_FILE, Object.keys(require.cache).join('\n'));
});
