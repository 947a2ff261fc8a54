import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { statSync } from 'node:fs';
import { runProgram } from '../support/process.js';

const CLI = 'dist/apps/cli/main.js';

/** Runs an npm script of this repository as a user would, with the environment of the test run. */
function npm(args: string[]): { finished: Promise<{ code: number | null; stderr: string }> } {
  const child = spawn('npm', args, { env: process.env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  return { finished: once(child, 'exit').then(([code]) => ({ code: code as number | null, stderr })) };
}

function identity(file: string): string {
  const stat = statSync(file);
  return `${stat.ino}:${stat.mtimeMs}`;
}

describe('the built output (npm ci builds it once)', () => {
  it('npm run cli runs the built CLI as it is: it neither deletes nor rebuilds dist', async () => {
    const before = identity(CLI);
    const { code } = await npm(['run', '--silent', 'cli', '--', '--help']).finished;
    expect(code).toBe(0);
    expect(identity(CLI)).toBe(before);
  });

  it('a CLI call made while another command builds never finds dist missing', async () => {
    const build = npm(['run', '--silent', 'build']);
    let buildDone = false;
    void build.finished.then(() => (buildDone = true));
    const failures: string[] = [];
    let calls = 0;
    // At least three calls, and more for as long as the build runs.
    while (calls < 3 || !buildDone) {
      const result = await runProgram(CLI, {}, ['--help']);
      calls++;
      if (result.code !== 0) failures.push(result.stderr.split('\n')[0] ?? '');
    }
    expect((await build.finished).code).toBe(0);
    expect(failures).toEqual([]);
  });
});
