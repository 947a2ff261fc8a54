import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { TestBroker, uniquePrefix } from '../support/broker.js';
import { dispatcherEnv, finishedWithin, startProgram } from '../support/process.js';
import { waitFor } from '../support/wait.js';

const DISPATCHER = 'dist/apps/dispatcher/main.js';

/**
 * Development mode's embedded database (PGlite in .data/delivery-log) is PostgreSQL's files
 * without a postmaster: two processes that open one folder both write it, and one's committed rows
 * are lost (a second `npm start` beside the first, or `start:api` and `start:dispatcher` in two
 * terminals). The second must be refused before it opens the folder, and a folder whose holder
 * died (kill -9) must still open.
 */
describe("development mode's embedded database, one process at a time", () => {
  const prefix = uniquePrefix('dev-database');
  let cwd: string;

  beforeAll(() => {
    // Its own .data/, with the repository's development merchants.
    cwd = mkdtempSync(join(tmpdir(), 'dev-database-'));
    symlinkSync(resolve('config'), join(cwd, 'config'));
  });

  afterAll(async () => {
    rmSync(cwd, { recursive: true, force: true });
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
  });

  const env = () => {
    // Development mode's own: the embedded database and its key, not the tests' database.
    const { DATABASE_URL: _url, SECRETS_KEY: _key, ...rest } = dispatcherEnv(prefix, '', { WEBHOOKS_DEV: 'true' });
    return rest;
  };
  const start = () => {
    const program = startProgram(resolve(DISPATCHER), env(), [], cwd);
    return program;
  };
  // A fresh folder is PGlite's files made and every migration run in WebAssembly: 8 s alone here, past
  // 30 s on a slower machine's CI beside the other files (2026-11-30).
  const consuming = (program: ReturnType<typeof start>) =>
    waitFor('dispatcher consuming', () => program.output.stdout.includes('dispatcher consuming'), 75_000, 100).catch((err: Error) => {
      throw new Error(`${err.message}\n${program.output.stdout.slice(-2_000)}${program.output.stderr}`);
    });

  // One case, not two: the first process's clean stop is the folder the next start opens, so the
  // start a case of its own spent on "after a clean stop" (a PGlite opened in WebAssembly, ~2.5
  // CPU-s) is not made again.
  it('refuses a second process on the folder a running one holds, naming the folder and that process; opens, after a clean stop and after its holder was killed, with what was there', async () => {
    const first = start();
    let second: ReturnType<typeof start> | undefined;
    let again: ReturnType<typeof start> | undefined;
    let third: ReturnType<typeof start> | undefined;
    try {
      await consuming(first);
      second = start();
      const result = await finishedWithin(second, 30_000);
      expect(result).toBeDefined();
      expect(result!.code).toBe(1);
      expect(result!.stderr).toContain(`dispatcher could not start: the embedded database ${join(cwd, '.data/delivery-log')} is in use by process ${first.child.pid}`);
      // The first one carries on, and stops as usual.
      expect(first.child.exitCode).toBeNull();
      first.child.kill('SIGTERM');
      expect((await first.finished).code).toBe(0);

      // After a clean stop.
      again = start();
      await consuming(again);
      // The development merchants were kept: written once, by the first start.
      expect(again.output.stdout).not.toContain('development merchants written to the embedded database');
      // After its holder was killed.
      again.child.kill('SIGKILL');
      await again.finished;
      third = start();
      await consuming(third);
      expect(third.output.stdout).not.toContain('development merchants written to the embedded database');
      third.child.kill('SIGTERM');
      expect((await third.finished).code).toBe(0);
    } finally {
      for (const program of [first, second, again, third]) if (program && program.child.exitCode === null) program.child.kill('SIGKILL');
    }
  }, 420_000);
});
