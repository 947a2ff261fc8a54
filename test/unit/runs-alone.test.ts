import { jest } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import SharedFirstThenAloneRunner, { QUIET_WORKERS, runsAlone, runsQuiet } from '../support/runner.js';

const testFiles = readdirSync('test', { recursive: true })
  .map((file) => join('test', String(file)))
  .filter((file) => file.endsWith('.test.ts') && !file.startsWith(join('test', 'cluster')));
const checked = testFiles.filter((file) => file !== join('test', 'unit', 'runs-alone.test.ts')); // it names the controls

/**
 * What stops, restarts, blocks or reconfigures the shared broker or PostgreSQL server. A private
 * server (test/support/private-postgres.ts, the cluster's own nodes) is no one else's.
 */
const SHARED_FAULTS: Array<[string, RegExp]> = [
  ['stops and starts the broker (broker-control.ts)', /\bbrokerControl\(/],
  ['stop_app, start_app, stop or restart through rabbitmqctl', /['"](stop_app|start_app|stop|reset|force_reset|shutdown)['"]/],
  ['a memory or disk alarm', /set_vm_memory_high_watermark|set_disk_free_limit/],
  // A policy applies to every queue its pattern matches, whoever declared it; closing connections
  // closes everyone's. A user or vhost a file adds for itself (production-guide.test.ts) is not.
  ['a policy of the broker, or everyone\'s connections closed', /['"](set_policy|clear_policy|set_operator_policy|close_all_connections)['"]/],
  ['the shared user guest changed or deleted', /['"](delete_user|change_password|clear_permissions|set_permissions)['"][^\n]*['"]guest['"]/],
  ['restarts or stops the PostgreSQL server', /pg_ctl|pg_ctlcluster|pg_terminate_backend|ALTER SYSTEM/],
];

describe('the files that run alone (@runs-alone, after every other file: README "Run it, test it")', () => {
  it.each(checked)('%s carries @runs-alone if it stops, blocks or reconfigures the shared broker or database', (file) => {
    const source = readFileSync(file, 'utf8');
    const faults = SHARED_FAULTS.filter(([, pattern]) => pattern.test(source)).map(([what]) => what);
    if (faults.length > 0) expect({ file, faults, markedRunsAlone: runsAlone(file) !== undefined }).toEqual({ file, faults, markedRunsAlone: true });
    if (runsAlone(file) !== undefined) expect(runsAlone(file)).not.toBe('marked @runs-alone'); // says why
  });

  it('quiet files say why, and none is also marked alone', () => {
    const quiet = testFiles.filter((file) => runsQuiet(file) !== undefined);
    expect(quiet.length).toBeGreaterThan(0);
    for (const file of quiet) {
      expect({ file, reason: runsQuiet(file) }).not.toEqual({ file, reason: 'marked @runs-quiet' });
      expect({ file, alone: runsAlone(file) }).toEqual({ file, alone: undefined });
    }
  });

  it('are run after the others, one at a time; the quiet ones before them, two at a time; the others in parallel', async () => {
    const calls: Array<{ files: string[]; serial: boolean; workers: number }> = [];
    // Its base class, jest-runner's TestRunner, runs a set of files in parallel or in band, with as
    // many workers as its global config says.
    const base = Object.getPrototypeOf(SharedFirstThenAloneRunner.prototype) as SharedFirstThenAloneRunner;
    const spy = jest.spyOn(base, 'runTests').mockImplementation(async function (this: { _globalConfig: { maxWorkers: number } }, tests, _watcher, options) {
      calls.push({ files: tests.map((test) => test.path), serial: options.serial, workers: this._globalConfig.maxWorkers });
    });
    try {
      const marked = testFiles.filter((file) => runsAlone(file) !== undefined);
      const quiet = testFiles.filter((file) => runsQuiet(file) !== undefined);
      const others = testFiles.filter((file) => runsAlone(file) === undefined && runsQuiet(file) === undefined);
      expect(marked.length).toBeGreaterThan(0);
      const tests = [marked[0]!, quiet[0]!, others[0]!, quiet[1]!, others[1]!].map((path) => ({ path }));
      const runner = new SharedFirstThenAloneRunner({ maxWorkers: 3 }, {});
      await runner.runTests(tests, { isInterrupted: () => false }, { serial: false });
      expect(calls).toEqual([
        { files: [others[0], others[1]], serial: false, workers: 3 },
        { files: [quiet[0], quiet[1]], serial: false, workers: QUIET_WORKERS },
        { files: [marked[0]], serial: true, workers: 3 },
      ]);
    } finally {
      spy.mockRestore();
    }
  });
});
