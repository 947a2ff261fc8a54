import type { Command } from 'commander';
import { NothingToResendError } from '../../libs/failed/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { resendService, withBroker, withFailures } from './broker.js';
import { action } from './command.js';
import { type CliContext, type CliIo, writeLine } from './context.js';
import { NothingMatchedError } from './errors.js';
import { EXIT } from './help-text.js';
import { checkReference, requireMerchant } from './options.js';

export interface FailedResendOptions {
  merchantId: string;
  reference: string;
}

export function declareFailedResend(failed: Command, io: CliIo): void {
  failed
    .command('resend')
    .summary("resends a merchant's failed webhooks for one reference")
    .usage('<reference> --merchant <id>')
    .description(
      "Does what the merchant's POST /nucleus/tnx/webhook?reference=<reference> does, for an operator: " +
        'republishes every unresolved failed webhook of that merchant and reference to <TOPOLOGY_PREFIX>.dispatch, ' +
        'each failure to the endpoint it failed on (a webhook fails once per endpoint), ' +
        'with its original webhook-id and fresh attempt counters, claiming them in PostgreSQL (DATABASE_URL) ' +
        'as the API does, so that no replica sends them again. Prints how many were resent. Makes the API\'s checks first: ' +
        'nothing is resent while every endpoint of the merchant is disabled or none is set up, and a failure whose endpoint ' +
        'is disabled, deleted or no longer receives its event stays failed (merchants from MERCHANTS_FILE when set, else ' +
        'the merchants table).',
    )
    .argument('<reference>', 'the reference, exactly as published (a refund: its refundRef or its tnxRef)')
    .option('--merchant <id>', 'the merchant the webhooks belong to (required)')
    .addHelpText('after', `\n${EXIT} (1 also when nothing went because the endpoints are disabled, deleted or do not receive the event; 3: nothing unresolved for this merchant and reference, or no such merchant)`)
    .action(
      action(
        io,
        (raw: { merchant?: string }, [reference]): FailedResendOptions => ({
          merchantId: requireMerchant(raw.merchant, 'failed resend'),
          reference: checkReference(reference!),
        }),
        run,
      ),
    );
}

async function run({ merchantId, reference }: FailedResendOptions, ctx: CliContext): Promise<number> {
  const names = topologyNames(ctx.config.TOPOLOGY_PREFIX);
  const count = await withFailures(ctx.config, async (store, merchantOf) => {
    // The API's checks, made by the same ResendService: the webhook on, the event still received.
    const merchant = await merchantOf(merchantId);
    return withBroker(ctx.config, [names.dispatch], async (broker) => {
      const resend = resendService(broker, store, ctx.config.TOPOLOGY_PREFIX);
      try {
        return await resend.resend(merchant, reference);
      } catch (err) {
        if (err instanceof NothingToResendError) {
          throw new NothingMatchedError(`no unresolved failed webhook for merchant ${merchantId} and reference ${reference}`);
        }
        throw err;
      } finally {
        await resend.drain();
      }
    });
  });
  writeLine(ctx.stdout, `resent ${count} webhook(s) for reference ${reference} of merchant ${merchantId}`);
  return 0;
}
