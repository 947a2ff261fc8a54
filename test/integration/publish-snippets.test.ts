import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseIntake } from '../../apps/dispatcher/stages/intake.js';
import { declareIntake } from '../../libs/topology/index.js';
import { topologyNames } from '../../libs/topology/names.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';

/**
 * docs/publishing.md shows a publish in Node and in Python. Both are run here as written in the
 * page (its code blocks, extracted), against the real broker with a topology of this file's own,
 * so that a snippet that no longer runs, or publishes something the dispatcher would park, fails.
 */
const PYTHON = '/usr/bin/python3';

/** The first fenced block of `language` under the heading `heading` of docs/publishing.md. */
function snippet(heading: string, language: string): string {
  const page = readFileSync('docs/publishing.md', 'utf8');
  const section = page.split(/^#{2,3} /m).find((part) => part.startsWith(heading));
  const code = section && new RegExp('```' + language + '\\n([\\s\\S]*?)```').exec(section)?.[1];
  if (!code) throw new Error(`docs/publishing.md has no ${language} block under "${heading}"`);
  return code;
}

interface Ran {
  code: number | null;
  output: string;
}

function run(command: string, file: string, env: Record<string, string>): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, [file], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

describe('the publish snippets of docs/publishing.md, run as written', () => {
  const prefix = uniquePrefix('publish-snippets');
  const names = topologyNames(prefix);
  const unbound = `${prefix}.unbound`;
  let broker: TestBroker;
  let dir: string;
  let nodeFile: string;
  let pythonFile: string;

  beforeAll(async () => {
    broker = await TestBroker.open();
    await declareIntake(broker.channel, prefix, { quorumGroupSize: 1, streamClusterSize: 1 });
    // An exchange no queue is bound to: a mandatory publish there comes back.
    await broker.channel.assertExchange(unbound, 'topic', { durable: false, autoDelete: false });
    // Inside node_modules, so that the Node snippet's `import amqp from 'amqplib'` resolves.
    mkdirSync('node_modules/.cache', { recursive: true });
    dir = mkdtempSync(join('node_modules', '.cache', 'publish-snippets-'));
    nodeFile = join(dir, 'publish.mjs');
    pythonFile = join(dir, 'publish.py');
    writeFileSync(nodeFile, snippet('From Node', 'js'));
    writeFileSync(pythonFile, snippet('From Python', 'python'));
  });

  afterAll(async () => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    await broker?.channel.deleteExchange(unbound).catch(() => {});
    await broker?.deleteTopology(prefix);
    await broker?.close();
  });

  const cases: Array<[string, () => [string, string], string]> = [
    ['Node (amqplib)', () => [process.execPath, nodeFile], 'evt_charge_tnx_123'],
    ['Python (pika)', () => [PYTHON, pythonFile], 'evt_payout_PO-123'],
  ];

  it.each(cases)('%s: the event is stored in the prefix\'s dispatch queue as the dispatcher takes it', async (_name, command, messageId) => {
    const [program, file] = command();
    const ran = await run(program, file, { RABBITMQ_URL: brokerUrl(), WEBHOOKS_EXCHANGE: names.events });
    expect(ran).toEqual({ code: 0, output: `published ${messageId}\n` });
    const [message, ...more] = await broker.drain(names.dispatch, 1);
    expect(more).toHaveLength(0);
    expect(message!.properties).toMatchObject({ messageId, deliveryMode: 2, contentType: 'application/json' });
    // What the dispatcher would do with it: no InvalidMessageError (it would park the message).
    const intake = parseIntake(message as never, 256 * 1024, new Date(), names.events, names.dispatch);
    expect(intake).toMatchObject({ merchantId: 'm_1', webhookId: messageId });
  });

  it.each(cases)('%s: a publish no queue takes fails, saying it was not stored', async (_name, command) => {
    const [program, file] = command();
    const ran = await run(program, file, { RABBITMQ_URL: brokerUrl(), WEBHOOKS_EXCHANGE: unbound });
    expect(ran.code).not.toBe(0);
    expect(ran.output).toContain('returned: no queue is bound to the exchange, not stored');
  });

  // Before the programs first ran, the exchange does not exist: the broker closes the channel.
  // Unheard, amqplib's 'error' event is an uncaught exception that ends the publisher's process.
  it.each(cases)('%s: a publish to an exchange that does not exist fails as the publish, naming the exchange', async (_name, command) => {
    const [program, file] = command();
    const missing = `${prefix}.missing`;
    const ran = await run(program, file, { RABBITMQ_URL: brokerUrl(), WEBHOOKS_EXCHANGE: missing });
    expect(ran.code).not.toBe(0);
    expect(ran.output).toContain(`no exchange '${missing}'`);
    expect(ran.output).not.toMatch(/Emitted 'error' event|Unhandled 'error' event/);
  });
});
