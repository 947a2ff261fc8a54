import { Command } from 'commander';
import type { CliIo } from './context.js';
import { declareFailedList } from './failed-list.js';
import { declareFailedReplay } from './failed-replay.js';
import { declareFailedResend } from './failed-resend.js';
import { ENVIRONMENT, EXIT } from './help-text.js';
import { declareInvalidList } from './invalid-list.js';
import { declareInvalidRequeue } from './invalid-requeue.js';
import { declareLog } from './log.js';
import { declareMerchants } from './merchants.js';
import { declareMigrate } from './migrate.js';
import { declarePortal } from './portal.js';
import { declarePublish } from './publish.js';
import { declareToken } from './token.js';

/**
 * The `webhooks` command line: one declaration per command gives its parsing, its --help and
 * "did you mean" for a mistyped option or command. Subcommands made with .command() inherit the
 * settings below (output, errors followed by the command's help, no process.exit from commander).
 */
export function createProgram(io: CliIo): Command {
  const program = new Command('webhooks')
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

  declarePublish(program, io);
  declareToken(program, io);

  const failed = program.command('failed').usage('<list|resend|replay> [options]').description('Failed webhooks, from PostgreSQL (DATABASE_URL): list, resend one reference, replay an outage.');
  declareFailedList(failed, io);
  declareFailedResend(failed, io);
  declareFailedReplay(failed, io);

  const invalid = program.command('invalid').usage('<list|requeue> [options]').description('Messages parked in <TOPOLOGY_PREFIX>.invalid: list them, move them back once fixed.');
  declareInvalidList(invalid, io);
  declareInvalidRequeue(invalid, io);

  declareMerchants(program, io);
  declareMigrate(program, io);
  declareLog(program, io);
  declarePortal(program, io);
  return program;
}
