#!/usr/bin/env node
import type { CliIo } from './command.js';
import { runCli } from './program.js';

/** Exits once what was written to stdout is flushed, so a piped listing is never cut short. */
function exit(code: number): void {
  process.exitCode = code;
  process.stdout.write('', () => process.exit(code));
}

// A reader gone (`| head`) must not cut a command off midway (a publish, a requeue): its output is dropped.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
  });
}

const io: CliIo = { env: process.env, stdout: process.stdout, stderr: process.stderr, now: () => new Date(), exitCode: 0, interrupts: process };

void runCli(io, process.argv.slice(2)).then(exit);
