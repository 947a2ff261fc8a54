#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { BrokerConnection } from '../../libs/broker/index.js';
import { replicationOf, withDevDefaults } from '../../libs/config/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { declareIntake } from '../../libs/topology/index.js';
import type { Command } from './command.js';
import { loadCliConfig } from './config.js';
import { NothingMatchedError, UsageError } from './errors.js';
import { failedList } from './failed-list.js';
import { failedReplay } from './failed-replay.js';
import { failedResend } from './failed-resend.js';
import { invalidList } from './invalid-list.js';
import { invalidRequeue } from './invalid-requeue.js';
import { merchantsGet, merchantsList, merchantsRotateSecret, merchantsSet } from './merchants.js';
import { publishCommand } from './publish.js';
import { tokenCommand } from './token.js';
import { FAILED_USAGE, INVALID_USAGE, MERCHANTS_USAGE, USAGE } from './usage.js';

interface CommandGroup {
  usage: string;
  commands: Map<string, Command<unknown>>;
}

const GROUPS = new Map<string, CommandGroup>([
  ['failed', { usage: FAILED_USAGE, commands: new Map<string, Command<unknown>>([['list', failedList], ['resend', failedResend], ['replay', failedReplay]]) }],
  ['invalid', { usage: INVALID_USAGE, commands: new Map<string, Command<unknown>>([['list', invalidList], ['requeue', invalidRequeue]]) }],
  [
    'merchants',
    {
      usage: MERCHANTS_USAGE,
      commands: new Map<string, Command<unknown>>([
        ['list', merchantsList],
        ['get', merchantsGet],
        ['set', merchantsSet],
        ['rotate-secret', merchantsRotateSecret],
      ]),
    },
  ],
]);

async function main(argv: string[]): Promise<number> {
  const group = argv[0] === undefined ? undefined : GROUPS.get(argv[0]);
  if (group) return runInGroup(argv[0]!, group, argv.slice(1));

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

  const config = loadCliConfig(process.env);
  const broker = new BrokerConnection({
    url: config.RABBITMQ_URL,
    name: 'webhooks-cli',
    logger: silentLogger(),
    declare: (openChannel) => declareIntake(openChannel, config.TOPOLOGY_PREFIX, replicationOf(config)),
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

/** `webhooks failed list …`: the command's own options, its own --help, then the environment. */
async function runInGroup(groupName: string, group: CommandGroup, args: string[]): Promise<number> {
  const [name, ...rest] = args;
  if (name === '--help' || name === '-h') {
    process.stdout.write(`${group.usage}\n`);
    return 0;
  }
  const names = [...group.commands.keys()].join(', ');
  if (name === undefined) throw new UsageError(`${groupName} needs a command: ${names}`, group.usage);
  const command = group.commands.get(name);
  if (!command) throw new UsageError(`unknown command ${groupName} ${name} (one of ${names})`, group.usage);
  const options = command.parse(rest, new Date());
  if (options === 'help') {
    process.stdout.write(`${command.usage}\n`);
    return 0;
  }
  // Parsed once, here, after the command line: --help and usage errors need no environment.
  const config = loadCliConfig(process.env);
  return command.run(options, { config, stdout: process.stdout, stderr: process.stderr });
}

function isParseArgsError(err: unknown): boolean {
  return String((err as { code?: unknown })?.code ?? '').startsWith('ERR_PARSE_ARGS');
}

/** Broker errors can quote the URL; its password never reaches the terminal. */
function withoutSecrets(text: string): string {
  let result = text;
  for (const url of (process.env.RABBITMQ_URL ?? '').split(',')) {
    let password = '';
    try {
      password = decodeURIComponent(new URL(url.trim()).password);
    } catch {
      // not a URL: the config check reports it without echoing it
    }
    if (password.length > 0) result = result.replaceAll(password, '***');
  }
  return result;
}

/** Exits once what was written to stdout is flushed, so a piped listing is never cut short. */
function exit(code: number): void {
  process.exitCode = code;
  process.stdout.write('', () => process.exit(code));
}

main(process.argv.slice(2)).then(exit, (err: Error) => {
  if (err instanceof UsageError || isParseArgsError(err)) {
    process.stderr.write(`webhooks: ${err.message}\n\n${(err as UsageError).usage ?? USAGE}\n`);
    return exit(2);
  }
  if (err instanceof NothingMatchedError) {
    process.stderr.write(`webhooks: ${err.message}\n`);
    return exit(3);
  }
  process.stderr.write(`webhooks: ${withoutSecrets(err?.message ?? String(err))}\n`);
  return exit(1);
});
