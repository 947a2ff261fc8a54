import type { Command } from 'commander';
import { topologyNames } from '../../libs/topology/index.js';
import { withBroker } from './broker.js';
import { action } from './command.js';
import { type CliContext, type CliIo, writeLine } from './context.js';
import { NothingMatchedError } from './errors.js';
import { EXIT, NO_REQUEUE } from './help-text.js';
import { checkInvalidCode, INVALID_CODES_HELP } from './invalid-code.js';
import { parkedJson, parkedTable } from './invalid-output.js';
import { type ParkedMessage, passOverInvalid } from './invalid-pass.js';
import { parseLimit } from './options.js';

export interface InvalidListOptions {
  code?: string;
  limit: number;
  json: boolean;
}

export function declareInvalidList(invalid: Command, io: CliIo): void {
  invalid
    .command('list')
    .summary('shows parked messages and why, without removing them')
    .description(
      'Shows the messages parked in <TOPOLOGY_PREFIX>.invalid: code, reason, invalid-at, original routing ' +
        'key, message id, body size and the first 200 characters of the body. Removes nothing.',
    )
    .option('--code <code>', 'only this code (below)')
    .option('--limit <n>', 'show at most N, in queue order', '500')
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .addHelpText('after', `\n${INVALID_CODES_HELP}\n\n${NO_REQUEUE}\n${EXIT}`)
    .action(
      action(
        io,
        (raw: { code?: string; limit: string; json: boolean }): InvalidListOptions => ({
          code: raw.code === undefined ? undefined : checkInvalidCode(raw.code),
          limit: parseLimit(raw.limit),
          json: raw.json,
        }),
        run,
      ),
    );
}

async function run(options: InvalidListOptions, ctx: CliContext): Promise<number> {
  const names = topologyNames(ctx.config.TOPOLOGY_PREFIX);
  const shown: ParkedMessage[] = [];
  let matched = 0;
  // The whole queue is passed over even past --limit, so it ends in the order it started in.
  await withBroker(ctx.config, [names.invalid], (broker) =>
    passOverInvalid(broker, names, (parked) => {
      if (options.code === undefined || parked.code === options.code) {
        matched++;
        if (shown.length < options.limit) shown.push(parked);
      }
      return 'keep';
    }),
  );
  if (options.json) writeLine(ctx.stdout, JSON.stringify(shown.map(parkedJson)));
  if (matched === 0) {
    throw new NothingMatchedError(options.code === undefined ? `${names.invalid} is empty` : `no parked message has code ${options.code}`);
  }
  if (!options.json) writeLine(ctx.stdout, parkedTable(shown));
  if (shown.length < matched) writeLine(ctx.stderr, `showing the first ${shown.length} of ${matched}; raise --limit to see more`);
  return 0;
}
