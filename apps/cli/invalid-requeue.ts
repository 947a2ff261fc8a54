import { parseArgs } from 'node:util';
import { topologyNames } from '../../libs/topology/index.js';
import { withBroker } from './broker.js';
import type { Command } from './command.js';
import { writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { parkedTable } from './invalid-output.js';
import { type ParkedMessage, passOverInvalid } from './invalid-pass.js';
import { parseWithUsage } from './options.js';
import { INVALID_REQUEUE_USAGE as usage } from './usage.js';

export interface InvalidRequeueOptions {
  /** Undefined with --all. */
  code?: string;
  dryRun: boolean;
}

export const invalidRequeue: Command<InvalidRequeueOptions> = {
  usage,

  parse(args) {
    const { values, positionals } = parseWithUsage(usage, () =>
      parseArgs({
        args,
        allowPositionals: true,
        options: {
          code: { type: 'string' },
          all: { type: 'boolean', default: false },
          'dry-run': { type: 'boolean', default: false },
          help: { type: 'boolean', short: 'h' },
        },
      }),
    );
    if (values.help) return 'help';
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${positionals[0]}`, usage);
    // Moving everything must be asked for by name, never be what a forgotten --code does.
    if (values.code === undefined && !values.all) throw new UsageError('invalid requeue needs --code <code> or --all', usage);
    if (values.code !== undefined && values.all) throw new UsageError('give --code <code> or --all, not both', usage);
    if (values.code !== undefined && values.code.trim() === '') throw new UsageError('--code takes a code, e.g. unknown-merchant', usage);
    return { code: values.code, dryRun: values['dry-run'] };
  },

  async run(options, ctx) {
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
  },
};
