import { CommanderError } from 'commander';
import { type CliIo, NothingMatchedError } from './command.js';
import { createProgram } from './program.js';

/** Commander's own answers that are not errors: --help, a group's help asked for. */
const HELP_CODES = new Set(['commander.helpDisplayed', 'commander.version']);

/** Broker errors can quote the URL; its password never reaches the terminal. */
function withoutSecrets(text: string, rabbitmqUrl: string | undefined): string {
  let result = text;
  for (const url of (rabbitmqUrl ?? '').split(',')) {
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

/**
 * Runs one command line (the arguments after `webhooks`) on `io` and gives its exit code: 0 done,
 * 1 failed, 2 usage error, 3 nothing matched. The process around it (main.ts) only exits with it;
 * the tests run it in their own process, one node start less per command.
 */
export async function runCli(io: CliIo, argv: string[]): Promise<number> {
  try {
    await createProgram(io).parseAsync(argv, { from: 'user' });
    return io.exitCode;
  } catch (err) {
    // Commander has printed the message and the command's help already.
    if (err instanceof CommanderError) return HELP_CODES.has(err.code) ? 0 : 2;
    if (err instanceof NothingMatchedError) {
      io.stderr.write(`webhooks: ${err.message}\n`);
      return 3;
    }
    io.stderr.write(`webhooks: ${withoutSecrets((err as Error)?.message ?? String(err), io.env.RABBITMQ_URL)}\n`);
    return 1;
  }
}
