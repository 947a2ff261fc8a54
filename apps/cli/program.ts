import { CliCommand, type CliIo, ENVIRONMENT, EXIT } from './command.js';
import { declareFailed } from './failed.js';
import { declareInvalid } from './invalid.js';
import { declareLog } from './log.js';
import { declareMerchants } from './merchants.js';
import { declareMigrate } from './migrate.js';
import { declarePortal } from './portal.js';
import { declarePublish } from './publish.js';
import { declareToken } from './token.js';
import { declareWaitsList } from './waits-list.js';

/**
 * The `webhooks` command line: one declaration per command gives its parsing, its --help and
 * "did you mean" for a mistyped option or command. Subcommands made with .command() inherit the
 * settings below (output, errors followed by the command's help, no process.exit from commander).
 */
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

  declarePublish(program);
  declareToken(program);
  declareFailed(program);
  declareInvalid(program);
  declareWaitsList(program);
  declareMerchants(program);
  declareMigrate(program);
  declareLog(program);
  declarePortal(program);
  return program;
}
