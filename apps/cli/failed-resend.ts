import { parseArgs } from 'node:util';
import { NothingToResendError } from '../../libs/failed/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { openResendSession, withBroker } from './broker.js';
import type { Command } from './command.js';
import { writeLine } from './context.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { checkReference, parseWithUsage, requireMerchant } from './options.js';
import { FAILED_RESEND_USAGE as usage } from './usage.js';

export interface FailedResendOptions {
  merchantId: string;
  reference: string;
}

export const failedResend: Command<FailedResendOptions> = {
  usage,

  parse(args) {
    const { values, positionals } = parseWithUsage(usage, () =>
      parseArgs({
        args,
        allowPositionals: true,
        options: { merchant: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      }),
    );
    if (values.help) return 'help';
    if (positionals.length === 0) throw new UsageError('failed resend needs a <reference>', usage);
    if (positionals.length > 1) throw new UsageError(`unexpected argument ${positionals[1]}`, usage);
    return { merchantId: requireMerchant(values.merchant, 'failed resend', usage), reference: checkReference(positionals[0]!, usage) };
  },

  async run({ merchantId, reference }, ctx) {
    const names = topologyNames(ctx.config.TOPOLOGY_PREFIX);
    const count = await withBroker(ctx.config, [names.failed, names.dispatch], async (broker) => {
      const session = await openResendSession(broker, ctx.config.TOPOLOGY_PREFIX);
      try {
        return await session.resend.resend(merchantId, reference);
      } catch (err) {
        if (err instanceof NothingToResendError) {
          throw new NothingMatchedError(`no unresolved failed webhook for merchant ${merchantId} and reference ${reference}`);
        }
        throw err;
      } finally {
        await session.close();
      }
    });
    writeLine(ctx.stdout, `resent ${count} webhook(s) for reference ${reference} of merchant ${merchantId}`);
    return 0;
  },
};
