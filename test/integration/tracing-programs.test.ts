import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sampleEvent } from '../../libs/contracts/index.js';
import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { brokerUrl, TestBroker, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { OtlpReceiver } from '../support/otlp-receiver.js';
import { useTestDatabase } from '../support/postgres.js';
import { dispatcherEnv } from '../support/process.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * The built dispatcher as operators run it: without OTEL variables no SDK or exporter module is
 * loaded and the merchant's request carries no traceparent; with OTEL_EXPORTER_OTLP_ENDPOINT it
 * exports over the default protocol (http/protobuf) to a real receiver.
 */
const DISPATCHER = 'dist/apps/dispatcher/main.js';
const PRELOAD = 'test/support/loaded-modules.mjs';

describe('the dispatcher program with and without OTEL variables', () => {
  const prefix = uniquePrefix('tracingprog');
  let test: TestBroker;
  let receiver: Receiver;
  let otlp: OtlpReceiver;
  const own = useTestDatabase('tracing_programs');
  let broker: BrokerConnection;
  let publisher: EventPublisher;
  let child: ChildProcess | undefined;

  beforeAll(async () => {
    test = await TestBroker.open();
    receiver = await Receiver.start(() => 200);
    otlp = await OtlpReceiver.start();
    await seedMerchants(own.db.url, [testMerchant('m_prog', receiver.url)]);
    broker = new BrokerConnection({ url: brokerUrl(), name: 'test-tracing-programs', logger: silentLogger() });
    await broker.open(10_000);
    publisher = new EventPublisher(broker, prefix);
  });

  afterAll(async () => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    await broker?.close();
    await receiver?.close();
    await otlp?.close();
    await test?.deleteTopology(prefix);
    await test?.close();
  });

  /** Runs the dispatcher until it delivered one event, stops it, and says which modules it loaded. */
  async function deliverOne(otel: Record<string, string>): Promise<{ modules: string[]; workerModules: string[]; traceparent: unknown; stdout: string; stoppedInMs: number }> {
    const modulesDir = mkdtempSync(join(tmpdir(), 'modules-'));
    const modulesFile = join(modulesDir, 'loaded.txt');
    child = spawn(process.execPath, ['--import', `./${PRELOAD}`, DISPATCHER], {
      env: { PATH: process.env.PATH ?? '', ...dispatcherEnv(prefix, own.db.url, { LOADED_MODULES_FILE: modulesFile, ...otel }) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (stdout += c.toString()));
    const exited = once(child, 'exit');
    await waitFor('dispatcher consuming', () => stdout.includes('dispatcher consuming'), 20_000);
    const { messageId } = await publisher.publish(sampleEvent('payout', 'm_prog'));
    const request = await waitFor('the delivery', () => receiver.requests.find((r) => r.headers['webhook-id'] === messageId));
    const signalledAt = Date.now();
    child.kill('SIGTERM');
    const [code] = await exited;
    const stoppedInMs = Date.now() - signalledAt;
    expect({ code, stdout }).toMatchObject({ code: 0 });
    const workerModules = readdirSync(modulesDir)
      .filter((name) => name.startsWith('loaded.txt.thread-'))
      .flatMap((name) => readFileSync(join(modulesDir, name), 'utf8').split('\n'));
    return { modules: readFileSync(modulesFile, 'utf8').split('\n'), workerModules, traceparent: request.headers.traceparent, stdout, stoppedInMs };
  }

  const opentelemetry = (modules: string[]) =>
    [...new Set(modules.map((file) => /node_modules\/@opentelemetry\/([^/]+)\//.exec(file)?.[1]).filter((name): name is string => name !== undefined))].sort();

  it('loads no SDK and no exporter, exports nothing and sends no traceparent when no OTEL variable is set', async () => {
    const before = otlp.requests.length;
    const { modules, workerModules, traceparent } = await deliverOne({ OTEL_SERVICE_NAME: 'ignored-without-an-endpoint' });
    // The API package alone: a no-op.
    expect(opentelemetry(modules)).toEqual(['api']);
    expect(workerModules).toEqual([]);
    expect(traceparent).toBeUndefined();
    expect(otlp.requests.length).toBe(before);
  });

  it('exports the delivery over http/protobuf (the default) and sends its traceparent when OTEL_EXPORTER_OTLP_ENDPOINT is set', async () => {
    // A collector behind basic auth, its credentials in the URL (the exporter sends them): never in the log.
    const endpoint = otlp.endpoint.replace('http://', 'http://collector:s3cr3t-otlp@');
    const { modules, workerModules, traceparent, stdout } = await deliverOne({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_SERVICE_NAME: 'dispatcher-under-test' });
    // The SDK and its protobuf exporter, on the program's thread; no thread of ours.
    expect(opentelemetry(modules)).toEqual(expect.arrayContaining(['api', 'sdk-trace-node', 'sdk-trace', 'exporter-trace-otlp-proto']));
    expect(opentelemetry(modules)).not.toContain('exporter-trace-otlp-http');
    expect(workerModules).toEqual([]);
    expect(String(traceparent)).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    // The stop flushed what was buffered: the delivery's span, read back from the protobuf.
    expect(otlp.requests).toContain('application/x-protobuf');
    expect(otlp.spans.find((s) => s.service === 'dispatcher-under-test' && s.kind === 5 && s.traceId === /^00-([0-9a-f]{32})-/.exec(String(traceparent))?.[1])).toBeDefined();
    expect(stdout).toContain('"message":"tracing on"');
    expect(stdout).not.toContain('s3cr3t-otlp');
  });

  it('has `webhooks publish` export its publish span and put that span in the event\'s traceparent', async () => {
    const cli = spawn(process.execPath, ['dist/apps/cli/main.js', 'publish', '--sample', 'payout', '--merchant', 'm_prog', '--message-id', 'evt_cli_traced'], {
      env: {
        PATH: process.env.PATH ?? '',
        RABBITMQ_URL: brokerUrl(),
        TOPOLOGY_PREFIX: prefix,
        QUORUM_GROUP_SIZE: '1',
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    cli.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    cli.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    const [code] = await once(cli, 'exit');
    expect({ code, output }).toMatchObject({ code: 0 });
    // Exported before the CLI exited.
    const span = otlp.spans.find((s) => s.attributes['webhook.id'] === 'evt_cli_traced');
    expect(span).toMatchObject({ service: 'webhooks-cli', name: `publish ${prefix}.events`, kind: 4 });
    const [message] = await test.drain(`${prefix}.dispatch`, 1);
    expect(message!.properties.messageId).toBe('evt_cli_traced');
    expect(String(message!.properties.headers?.traceparent)).toBe(`00-${span!.traceId}-${span!.spanId}-01`);
  });

  it('stops on SIGTERM within SHUTDOWN_TIMEOUT and exits 0 while the collector never answers', async () => {
    const hanging = await OtlpReceiver.start('hang');
    try {
      const { stdout, stoppedInMs } = await deliverOne({ OTEL_EXPORTER_OTLP_ENDPOINT: hanging.endpoint, SHUTDOWN_TIMEOUT: '2s' });
      // Within SHUTDOWN_TIMEOUT by the program's own clock: else the backstop exits 1 at 3 s saying
      // this (an unbounded export to the collector takes 10 s). The test's clock adds the signal's
      // delivery and the process's exit, stretched past 3 s on a loaded CI machine (3,333 ms, exit 0).
      expect(stdout).not.toContain('shutdown timed out');
      expect(stoppedInMs).toBeLessThan(10_000);
    } finally {
      await hanging.close();
    }
  });

  it('refuses an unsupported protocol at start-up, naming the variable', async () => {
    const program = spawn(process.execPath, [DISPATCHER], {
      env: { PATH: process.env.PATH ?? '', DATABASE_URL: own.db.url, SECRETS_KEY: TEST_SECRETS_KEY, OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    program.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const [code] = await once(program, 'exit');
    expect(code).toBe(1);
    expect(stderr).toContain('OTEL_EXPORTER_OTLP_PROTOCOL');
    expect(stderr).toContain('http/protobuf');
  });
});
