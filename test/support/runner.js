// Jest's test runner, in three parts: the test files that may share the broker and the database with
// others run in parallel (maxWorkers); then the files marked `@runs-quiet`, two at a time: they time
// things in seconds or less, which the parallel files' load (both cores busy) stretched past their
// bounds, but another quiet file beside them leaves most of a core; then the files marked
// `@runs-alone`, one at a time with nothing else running. A file is marked alone when it stops,
// restarts, blocks or reconfigures the shared RabbitMQ node or PostgreSQL server (rabbitmqctl
// stop_app, a memory alarm, pg_ctlcluster restart): any file running beside it would see the fault
// as its own failure. The marker is a pragma in the file's first docblock, as Jest's own
// `@jest-environment`:
//
//   /**
//    * @runs-alone sets a memory alarm on the shared broker: every publisher is blocked meanwhile
//    */
//
// test/unit/runs-alone.test.ts checks that every file using those controls carries it.
import { readFileSync } from 'node:fs';
import TestRunner from 'jest-runner';

/** The reason a pragma gives when the file's leading docblock has it, else undefined. */
function pragma(path, name) {
  const head = readFileSync(path, 'utf8').match(/^\s*(?:\/\/[^\n]*\n\s*)*\/\*\*([\s\S]*?)\*\//);
  const found = head?.[1].match(new RegExp(`@${name}\\b([^\\n]*)`));
  return found ? found[1].replace(/\*\/$/, '').trim() || `marked @${name}` : undefined;
}

/** `@runs-alone`'s reason, else undefined. */
export const runsAlone = (path) => pragma(path, 'runs-alone');

/** `@runs-quiet`'s reason, else undefined. */
export const runsQuiet = (path) => pragma(path, 'runs-quiet');

/** How many quiet files run at once. */
export const QUIET_WORKERS = 2;

export default class SharedFirstThenAloneRunner extends TestRunner {
  async runTests(tests, watcher, options) {
    const alone = tests.filter((test) => runsAlone(test.path) !== undefined);
    const quiet = tests.filter((test) => runsAlone(test.path) === undefined && runsQuiet(test.path) !== undefined);
    const shared = tests.filter((test) => runsAlone(test.path) === undefined && runsQuiet(test.path) === undefined);
    if (shared.length > 0) await super.runTests(shared, watcher, options);
    if (quiet.length > 0 && !watcher.isInterrupted()) {
      // jest-runner sizes its pool from the global config: narrowed for this part only.
      const config = this._globalConfig;
      this._globalConfig = { ...config, maxWorkers: Math.min(QUIET_WORKERS, config.maxWorkers) };
      try {
        await super.runTests(quiet, watcher, options);
      } finally {
        this._globalConfig = config;
      }
    }
    if (alone.length > 0 && !watcher.isInterrupted()) await super.runTests(alone, watcher, { ...options, serial: true });
  }
}
