#!/usr/bin/env node
import { CommanderError } from 'commander';
import type { CliIo } from './context.js';
import { NothingMatchedError } from './errors.js';
import { createProgram } from './program.js';

/** Commander's own answers that are not errors: --help, a group's help asked for. */
const HELP_CODES = new Set(['commander.helpDisplayed', 'commander.version']);

/** Broker errors can quote the URL; its password never reaches the terminal. */
function withoutSecrets(text: string): string {
  let result = text;
  for (const url of (process.env.RABBITMQ_URL ?? '').split(',')) {
    let password = '';
    try {
      password = decodeURIComponent(new URL(url.trim()).password);
    } catch {
      // not a URL: the config check reports it without echoing it
    }
    if (password.length > 0) result = result.replaceAll(password, '***');
  }
  return result;
}

/** Exits once what was written to stdout is flushed, so a piped listing is never cut short. */
function exit(code: number): void {
  process.exitCode = code;
  process.stdout.write('', () => process.exit(code));
}

const io: CliIo = { env: process.env, stdout: process.stdout, stderr: process.stderr, now: () => new Date(), exitCode: 0 };

createProgram(io)
  .parseAsync(process.argv.slice(2), { from: 'user' })
  .then(
    () => exit(io.exitCode),
    (err: Error) => {
      // Commander has printed the message and the command's help already.
      if (err instanceof CommanderError) return exit(HELP_CODES.has(err.code) ? 0 : 2);
      if (err instanceof NothingMatchedError) {
        process.stderr.write(`webhooks: ${err.message}\n`);
        return exit(3);
      }
      process.stderr.write(`webhooks: ${withoutSecrets(err?.message ?? String(err))}\n`);
      return exit(1);
    },
  );
