import { parseArgs } from 'node:util';
import { readFailures } from '../../libs/failed/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { withBroker } from './broker.js';
import type { Command } from './command.js';
import { writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { type FailureFilter, matchesFailure } from './failure-filter.js';
import { failureJson, failuresTable } from './failure-output.js';
import { checkReference, parseLimit, parseTime, parseWithUsage, requireMerchant } from './options.js';
import { FAILED_LIST_USAGE as usage } from './usage.js';

export interface FailedListOptions {
  filter: FailureFilter;
  all: boolean;
  limit: number;
  json: boolean;
}

export const failedList: Command<FailedListOptions> = {
  usage,

  parse(args, now) {
    const { values, positionals } = parseWithUsage(usage, () =>
      parseArgs({
        args,
        allowPositionals: true,
        options: {
          merchant: { type: 'string' },
          reference: { type: 'string' },
          since: { type: 'string' },
          until: { type: 'string' },
          all: { type: 'boolean', default: false },
          limit: { type: 'string', default: '500' },
          json: { type: 'boolean', default: false },
          help: { type: 'boolean', short: 'h' },
        },
      }),
    );
    if (values.help) return 'help';
    if (positionals.length > 0) throw new UsageError(`unexpected argument ${positionals[0]}`, usage);
    const filter: FailureFilter = {
      merchantId: values.merchant === undefined ? undefined : requireMerchant(values.merchant, 'failed list', usage),
      reference: values.reference === undefined ? undefined : checkReference(values.reference, usage),
      since: values.since === undefined ? undefined : parseTime('since', values.since, now, usage),
      until: values.until === undefined ? undefined : parseTime('until', values.until, now, usage),
    };
    if (filter.since && filter.until && filter.since >= filter.until) throw new UsageError('--since must be before --until', usage);
    return { filter, all: values.all, limit: parseLimit(values.limit, usage), json: values.json };
  },

  async run(options, ctx) {
    const { failed } = topologyNames(ctx.config.TOPOLOGY_PREFIX);
    const records = await withBroker(ctx.config, [failed], (broker) =>
      readFailures(broker, failed, { from: options.filter.since, match: matchesFailure(options.filter) }),
    );
    const visible = options.all ? records : records.filter((r) => !r.resolved);
    const shown = visible.slice(-options.limit);
    // Scripts get a JSON array even when it is empty; the exit code says whether anything matched.
    if (options.json) writeLine(ctx.stdout, JSON.stringify(shown.map(failureJson)));
    if (visible.length === 0) throw new NothingMatchedError(options.all ? 'no failed webhook matches' : 'no unresolved failed webhook matches');
    if (!options.json) writeLine(ctx.stdout, failuresTable(shown, options.all));
    if (shown.length < visible.length) writeLine(ctx.stderr, `showing the ${shown.length} most recent of ${visible.length}; raise --limit to see more`);
    return 0;
  },
};
