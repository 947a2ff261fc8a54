// Jest's test runner, in two parts: the test files that may share the broker and the database with
// others run in parallel (maxWorkers), then the files marked `@runs-alone` run one at a time, with
// nothing else running. A file is marked when it stops, restarts, blocks or reconfigures the shared
// RabbitMQ node or PostgreSQL server (rabbitmqctl stop_app, a memory alarm, pg_ctlcluster restart):
// any file running beside it would see the fault as its own failure. The marker is a pragma in the
// file's first docblock, as Jest's own `@jest-environment`:
//
//   /**
//    * @runs-alone sets a memory alarm on the shared broker: every publisher is blocked meanwhile
//    */
//
// test/unit/runs-alone.test.ts checks that every file using those controls carries it.
import { readFileSync } from 'node:fs';
import TestRunner from 'jest-runner';

/** The pragma's text (its reason) when the file's leading docblock has one, else undefined. */
export function runsAlone(path) {
  const head = readFileSync(path, 'utf8').match(/^\s*(?:\/\/[^\n]*\n\s*)*\/\*\*([\s\S]*?)\*\//);
  const pragma = head?.[1].match(/@runs-alone\b([^\n]*)/);
  return pragma ? pragma[1].replace(/\*\/$/, '').trim() || 'marked @runs-alone' : undefined;
}

export default class SharedFirstThenAloneRunner extends TestRunner {
  async runTests(tests, watcher, options) {
    const alone = tests.filter((test) => runsAlone(test.path) !== undefined);
    const shared = tests.filter((test) => runsAlone(test.path) === undefined);
    if (shared.length > 0) await super.runTests(shared, watcher, options);
    if (alone.length > 0 && !watcher.isInterrupted()) await super.runTests(alone, watcher, { ...options, serial: true });
  }
}
