#!/usr/bin/env node
import type { CliIo } from './command.js';
import { runCli } from './program.js';

/** Exits once what was written to stdout is flushed, so a piped listing is never cut short. */
function exit(code: number): void {
  process.exitCode = code;
  process.stdout.write('', () => process.exit(code));
}

const io: CliIo = { env: process.env, stdout: process.stdout, stderr: process.stderr, now: () => new Date(), exitCode: 0 };

void runCli(io, process.argv.slice(2)).then(exit);
