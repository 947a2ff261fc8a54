import type { Command } from 'commander';
import { topologyNames } from '../../libs/topology/index.js';
import { withBroker } from './broker.js';
import { action } from './command.js';
import { type CliContext, type CliIo, writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { EXIT, NO_REQUEUE } from './help-text.js';
import { checkInvalidCode, INVALID_CODES_HELP } from './invalid-code.js';
import { parkedTable } from './invalid-output.js';
import { type ParkedMessage, passOverInvalid } from './invalid-pass.js';

export interface InvalidRequeueOptions {
  /** Undefined with --all. */
  code?: string;
  dryRun: boolean;
}

interface Raw {
  code?: string;
  all: boolean;
  dryRun: boolean;
}

export function declareInvalidRequeue(invalid: Command, io: CliIo): void {
  invalid
    .command('requeue')
    .summary('moves parked messages back to dispatch once their cause is fixed')
    .usage('(--code <code> | --all) [--dry-run]')
    .description(
      'After a fix upstream or in the merchant directory, moves parked messages back to ' +
        '<TOPOLOGY_PREFIX>.dispatch: body, messageId and headers kept, the x-invalid-* headers removed. If ' +
        'the cause is not fixed, the dispatcher parks them again.',
    )
    .option('--code <code>', 'move the messages with this code (below)')
    .option('--all', 'move every parked message', false)
    .option('--dry-run', 'move nothing; print what would move', false)
    .addHelpText('after', `\n${INVALID_CODES_HELP}\n\n${NO_REQUEUE}\n${EXIT} (3: no parked message matched)`)
    .action(action(io, check, run));
}

function check(raw: Raw): InvalidRequeueOptions {
  // Moving everything must be asked for by name, never be what a forgotten --code does.
  if (raw.code === undefined && !raw.all) throw new UsageError('invalid requeue needs --code <code> or --all');
  if (raw.code !== undefined && raw.all) throw new UsageError('give --code <code> or --all, not both');
  return { code: raw.code === undefined ? undefined : checkInvalidCode(raw.code), dryRun: raw.dryRun };
}

async function run(options: InvalidRequeueOptions, ctx: CliContext): Promise<number> {
  const names = topologyNames(ctx.config.TOPOLOGY_PREFIX);
  const matching: ParkedMessage[] = [];
  const result = await withBroker(ctx.config, [names.invalid, names.dispatch], (broker) =>
    passOverInvalid(broker, names, (parked) => {
      if (options.code !== undefined && parked.code !== options.code) return 'keep';
      matching.push(parked);
      return options.dryRun ? 'keep' : 'move';
    }),
  );
  if (matching.length === 0) {
    throw new NothingMatchedError(options.code === undefined ? `${names.invalid} is empty` : `no parked message has code ${options.code}`);
  }
  if (options.dryRun) {
    writeLine(ctx.stdout, parkedTable(matching));
    writeLine(ctx.stdout, `dry run: would move ${matching.length} message(s) to ${names.dispatch}; nothing was moved`);
    return 0;
  }
  writeLine(ctx.stdout, `moved ${result.moved} message(s) to ${names.dispatch}; ${result.kept} left in ${names.invalid}`);
  return 0;
}
