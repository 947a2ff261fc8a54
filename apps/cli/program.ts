import { CommanderError } from 'commander';
import { CliCommand, type CliIo, ENVIRONMENT, EXIT, NothingMatchedError } from './command.js';
import { declareFailed } from './failed.js';
import { declareInvalid } from './invalid.js';
import { declareLog } from './log.js';
import { declareMerchants } from './merchants.js';
import { declareMigrate } from './migrate.js';
import { declarePortal } from './portal.js';
import { declarePublish } from './publish.js';
import { declareToken } from './token.js';
import { declareWaitsList } from './waits-list.js';

/** The `webhooks` command line; subcommands inherit its output, help after errors and no process.exit. */
export function createProgram(io: CliIo): CliCommand {
  const program = new CliCommand(io, 'webhooks')
    .description('Operator and developer commands for the webhook service, on the queues of TOPOLOGY_PREFIX on RABBITMQ_URL.')
    .exitOverride()
    .showHelpAfterError()
    .showSuggestionAfterError()
    .configureOutput({
      writeOut: (text) => io.stdout.write(text),
      writeErr: (text) => io.stderr.write(text),
      outputError: (text, write) => write(`webhooks: ${text.replace(/^error: /, '')}`),
    })
    // Help is read in terminals and in logs alike: one width, whatever the terminal.
    .configureHelp({ helpWidth: 110, showGlobalOptions: false })
    .addHelpText('after', `\n${ENVIRONMENT}\n${EXIT}`);

  // In the order the help lists them.
  const commands = [
    declarePublish, declareToken, declareFailed, declareInvalid, declareWaitsList,
    declareMerchants, declareMigrate, declareLog, declarePortal,
  ];
  for (const declare of commands) declare(program);
  return program;
}

/** Errors can quote a URL (the broker's, the database's); its password never reaches the terminal. */
function withoutSecrets(text: string, urls: string): string {
  let result = text;
  for (const url of urls.split(',')) {
    try {
      const password = decodeURIComponent(new URL(url.trim()).password);
      if (password.length > 0) result = result.replaceAll(password, '***');
    } catch {
      // not a URL: the config check reports it without echoing it
    }
  }
  return result;
}

/** Runs one command line (the arguments after `webhooks`) and gives its exit code (EXIT). */
export async function runCli(io: CliIo, argv: string[]): Promise<number> {
  try {
    await createProgram(io).parseAsync(argv, { from: 'user' });
    return io.exitCode;
  } catch (err) {
    // Commander has printed the message and the help; help asked for (exit code 0) is no error.
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
    if (err instanceof NothingMatchedError) {
      io.stderr.write(`webhooks: ${err.message}\n`);
      return 3;
    }
    io.stderr.write(`webhooks: ${withoutSecrets((err as Error)?.message ?? String(err), [io.env.RABBITMQ_URL, io.env.DATABASE_URL].join(','))}\n`);
    return 1;
  }
}
