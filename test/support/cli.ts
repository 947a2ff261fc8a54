import { Writable } from 'node:stream';
import type { CliIo } from '../../apps/cli/command.js';
import { runCli } from '../../apps/cli/program.js';
import type { Finished } from './process.js';

/** A stream that keeps what is written to it. */
function collector(onWrite?: (text: string) => void): Writable & { text: string } {
  const stream = new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      stream.text += chunk.toString();
      onWrite?.(stream.text);
      done();
    },
  }) as Writable & { text: string };
  stream.text = '';
  return stream;
}

/**
 * Runs a `webhooks` command line in this process, as `node dist/apps/cli/main.js ARGS` with `env`
 * as its whole environment (and PATH) would: the same exit code, stdout and stderr (main.ts only
 * exits with what runCli returns; test/integration/cli.test.ts runs the built binary itself). A node
 * start is some 0.8 s of CPU loading the CLI's modules, paid once per test file instead of per command.
 * `onStderr`: called with all of stderr so far at each write, to see what a command says while it runs.
 */
export async function runCliInProcess(env: Record<string, string>, args: string[], options: { onStderr?: (text: string) => void } = {}): Promise<Finished> {
  const stdout = collector();
  const stderr = collector(options.onStderr);
  const io: CliIo = { env: { PATH: process.env.PATH ?? '', ...env }, stdout, stderr, now: () => new Date(), exitCode: 0 };
  const code = await runCli(io, args);
  return { code, stdout: stdout.text, stderr: stderr.text };
}
