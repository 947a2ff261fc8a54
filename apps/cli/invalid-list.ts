import { parseArgs } from 'node:util';
import { topologyNames } from '../../libs/topology/index.js';
import { withBroker } from './broker.js';
import type { Command } from './command.js';
import { writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { parkedJson, parkedTable } from './invalid-output.js';
import { type ParkedMessage, passOverInvalid } from './invalid-pass.js';
import { parseLimit, parseWithUsage } from './options.js';
import { INVALID_LIST_USAGE as usage } from './usage.js';

export interface InvalidListOptions {
  code?: string;
  limit: number;
  json: boolean;
}

export const invalidList: Command<InvalidListOptions> = {
  usage,

  parse(args) {
    const { values, positionals } = parseWithUsage(usage, () =>
      parseArgs({
        args,
        allowPositionals: true,
        options: {
          code: { type: 'string' },
          limit: { type: 'string', default: '500' },
          json: { type: 'boolean', default: false },
          help: { type: 'boolean', short: 'h' },
        },
      }),
    );
    if (values.help) return 'help';
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${positionals[0]}`, usage);
    if (values.code !== undefined && values.code.trim() === '') throw new UsageError('--code takes a code, e.g. unknown-merchant', usage);
    return { code: values.code, limit: parseLimit(values.limit, usage), json: values.json };
  },

  async run(options, ctx) {
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
  },
};
