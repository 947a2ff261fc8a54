#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { BrokerConnection } from '../../libs/broker/index.js';
import { withDevDefaults } from '../../libs/config/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareIntake } from '../../libs/topology/index.js';
import { loadDispatcherConfig } from '../dispatcher/config.js';
import { UsageError } from './errors.js';
import { publishCommand } from './publish.js';
import { tokenCommand } from './token.js';

const USAGE = `Usage: webhooks <command> [options]

Commands:
  publish --sample <charge.completed|payout|refund.completed|all> --merchant <id> [--count N]
  publish --file <event.json> [--message-id <id>] [--count N]
      Publishes to <TOPOLOGY_PREFIX>.events as upstream services do.
  token --merchant <id> [--ttl 1h]
      Prints a development access token for the resend API, signed with AUTH_JWT_SECRET.

Environment: RABBITMQ_URL, TOPOLOGY_PREFIX, and AUTH_JWT_SECRET for token.
Exit codes: 0 done, 1 failed, 2 usage error.`;

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      sample: { type: 'string' },
      file: { type: 'string' },
      merchant: { type: 'string' },
      count: { type: 'string', default: '1' },
      'message-id': { type: 'string' },
      ttl: { type: 'string', default: '1h' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${USAGE}\n`);
    return values.help ? 0 : 2;
  }
  if (command === 'token') {
    const { env } = withDevDefaults(process.env);
    process.stdout.write(`${await tokenCommand({ merchant: values.merchant, ttl: values.ttl, secret: env.AUTH_JWT_SECRET })}\n`);
    return 0;
  }
  if (command !== 'publish') throw new UsageError(`unknown command ${command}`);
  const count = Number(values.count);
  if (!Number.isInteger(count) || count < 1 || count > 100_000) throw new UsageError('--count takes a whole number from 1 to 100000');

  const config = loadDispatcherConfig(process.env);
  const broker = new BrokerConnection({
    url: config.RABBITMQ_URL,
    name: 'webhooks-cli',
    logger: silentLogger(),
    declare: (channel) => declareIntake(channel, config.TOPOLOGY_PREFIX),
  });
  await broker.open(10_000);
  try {
    const lines = await publishCommand(new EventPublisher(broker, config.TOPOLOGY_PREFIX), {
      sample: values.sample,
      file: values.file,
      merchant: values.merchant,
      count,
      messageId: values['message-id'],
    });
    process.stdout.write(`${lines.join('\n')}\n`);
    return 0;
  } finally {
    await broker.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: Error) => {
    if (err instanceof UsageError || err.name === 'TypeError' && 'code' in err && String((err as { code: unknown }).code).startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`webhooks: ${err.message}\n\n${USAGE}\n`);
      process.exit(2);
    }
    process.stderr.write(`webhooks: ${err.message}\n`);
    process.exit(1);
  },
);
