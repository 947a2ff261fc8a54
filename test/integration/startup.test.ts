// Its bounds are against what each fault would otherwise cost (the 30 s start deadline, a shutdown
// that waits for a broker that never answers), not against a node process's start: that took 5 to
// 7.7 s on CI's loaded cores, and over 10 s once, so the file runs beside the others and waits up
// to 30 s for a program to get where a case starts.
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { resolve } from 'node:path';
import { sampleEvent } from '../../libs/contracts/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { FrozenProxy } from '../support/frozen-proxy.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { finishedWithin, runProgram, startProgram } from '../support/process.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { freePort, Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const DISPATCHER = 'dist/apps/dispatcher/main.js';
const API = 'dist/apps/api/main.js';

describe('dispatcher start-up and shutdown', () => {
  const prefix = uniquePrefix('startup');
  let test: TestBroker;
  /** The API keeps failed webhooks in PostgreSQL: required outside development mode. */
  let db: TestDatabase;

  beforeAll(async () => {
    test = await TestBroker.open();
    db = await createTestDatabase('startup');
    await seedMerchants(db.url, [testMerchant('m_1', 'http://127.0.0.1:9/hooks')]);
  });

  afterAll(async () => {
    await test.deleteTopology(prefix);
    await test.close();
    await db?.drop();
  });

  const env = (extra: Record<string, string> = {}) => ({
    RABBITMQ_URL: brokerUrl(),
    TOPOLOGY_PREFIX: prefix,
    SECRETS_KEY: TEST_SECRETS_KEY,
    RETRY_SCHEDULE: '1s,2s',
    DATABASE_URL: db.url,
    METRICS_PORT: '0',
    LOG_LEVEL: 'error',
    DELIVERY_LOG: 'off',
    ...extra,
  });
  /** What the API needs besides outside development mode: its database and the portal's address. */
  const apiEnv = (extra: Record<string, string> = {}) => env({ PORTAL_PUBLIC_URL: 'https://portal.example.com', ...extra });

  it('refuses a bad RETRY_SCHEDULE before connecting, naming the variable', async () => {
    const result = await runProgram(DISPATCHER, env({ RETRY_SCHEDULE: '5s,later' }));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Invalid configuration: RETRY_SCHEDULE: "later" is not a duration');
  });

  it('refuses to start when the failed stream exists with another retention, saying what to do', async () => {
    const clash = uniquePrefix('clash');
    const ch = await test.connection.createChannel();
    await ch.assertQueue(`${clash}.failed`, { durable: true, arguments: { 'x-queue-type': 'stream', 'x-max-age': '2D' } });
    await ch.close();
    try {
      const result = await runProgram(DISPATCHER, env({ TOPOLOGY_PREFIX: clash }));
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`stream ${clash}.failed already exists with different arguments`);
      expect(result.stderr).toContain('FAILED_RETENTION');
    } finally {
      await test.deleteTopology(clash);
    }
  });

  it('exits 1 naming the queue when a reconnect finds dispatch re-created with other arguments', async () => {
    const clash = uniquePrefix('reclash');
    const program = startProgram(DISPATCHER, env({ TOPOLOGY_PREFIX: clash, LOG_LEVEL: 'info' }));
    try {
      await waitFor('dispatcher consuming', () => program.output.stdout.includes('dispatcher consuming'), 30_000);
      // Deleting the queue cancels the dispatcher's consumer, which makes it reconnect and declare again.
      const ch = await test.connection.createChannel();
      await ch.deleteQueue(`${clash}.dispatch`);
      await ch.assertQueue(`${clash}.dispatch`, { durable: true });
      await ch.close();
      const result = await program.finished;
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`dispatcher stopped: queue ${clash}.dispatch already exists with different arguments`);
      // What to do for a queue, not the failed stream's advice: deleting dispatch undrained drops its webhooks.
      expect(result.stderr).toContain('drain it (stop publishing, let the old dispatchers empty it), then delete it');
      expect(result.stderr).not.toContain('FAILED_RETENTION');
    } finally {
      if (program.child.exitCode === null) program.child.kill('SIGKILL');
      await test.deleteTopology(clash);
    }
  });

  it('declares the topology, consumes, and exits 0 on SIGTERM', async () => {
    const program = startProgram(DISPATCHER, env({ LOG_LEVEL: 'info' }));
    await waitFor('dispatcher consuming', () => program.output.stdout.includes('dispatcher consuming'), 30_000);
    expect(await test.messageCount(`${prefix}.dispatch`)).toBe(0);
    program.child.kill('SIGTERM');
    const result = await program.finished;
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('shutting down');
  });

  it('refuses to start the API with real merchants and no token key, naming AUTH_JWT_SECRET', async () => {
    const result = await runProgram(API, apiEnv());
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Invalid configuration: AUTH_JWT_SECRET: set AUTH_JWT_SECRET or AUTH_JWKS_URL');
  });

  it('refuses to start the API outside development mode without PORTAL_PUBLIC_URL, naming it', async () => {
    // Two programs refused at their configuration, side by side: nothing of one reaches the other.
    const [result, plain] = await Promise.all([
      runProgram(API, apiEnv({ AUTH_JWT_SECRET: 'x'.repeat(40), PORTAL_PUBLIC_URL: '' })),
      runProgram(API, apiEnv({ AUTH_JWT_SECRET: 'x'.repeat(40), PORTAL_PUBLIC_URL: 'http://webhooks.example.com' })),
    ]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Invalid configuration: PORTAL_PUBLIC_URL: is required outside development mode');
    expect(plain.code).toBe(1);
    expect(plain.stderr).toContain('Invalid configuration: PORTAL_PUBLIC_URL: must be https outside development mode');
  });

  it('refuses a short AUTH_JWT_SECRET without printing it', async () => {
    const result = await runProgram(API, apiEnv({ AUTH_JWT_SECRET: 'short-secret' }));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Invalid configuration: AUTH_JWT_SECRET: must be at least 32 characters');
    expect(result.stderr).not.toContain('short-secret');
  });

  it('serves the API until SIGTERM, then exits 0', async () => {
    const program = startProgram(API, apiEnv({ LOG_LEVEL: 'info', PORT: '0', AUTH_JWT_SECRET: 'x'.repeat(40) }));
    try {
      await waitFor('listening', () => program.output.stdout.includes('api listening'), 30_000);
      program.child.kill('SIGTERM');
      expect((await program.finished).code).toBe(0);
    } finally {
      if (program.child.exitCode === null) program.child.kill('SIGKILL');
    }
  });

  it.each([
    ['dispatcher', 'SIGINT', DISPATCHER],
    ['API', 'SIGTERM', API],
  ])('stops the %s at once on %s while the broker cannot be reached, not after the connect deadline', async (_, signal, script) => {
    const unreachable = `amqp://guest:guest@127.0.0.1:${await freePort()}`;
    const program = startProgram(script, (script === API ? apiEnv : env)({ RABBITMQ_URL: unreachable, LOG_LEVEL: 'warn', PORT: '0', AUTH_JWT_SECRET: 'x'.repeat(40) }));
    try {
      await waitFor('a connect attempt failed', () => program.output.stdout.includes('broker connect failed'), 30_000);
      const signalledAt = Date.now();
      program.child.kill(signal as NodeJS.Signals);
      const result = await program.finished;
      // Not after the 30 s start deadline.
      expect(Date.now() - signalledAt).toBeLessThan(5_000);
      expect(result.code).toBe(0);
      expect(result.stderr).not.toContain('not reachable');
    } finally {
      if (program.child.exitCode === null) program.child.kill('SIGKILL');
    }
  });

  it.each([
    ['dispatcher', DISPATCHER],
    ['API', API],
  ])('stops the %s at once when RabbitMQ refuses the login, naming RABBITMQ_URL without the password', async (name, script) => {
    const password = 'not-the-password-4711';
    const url = new URL(brokerUrl());
    url.password = password;
    const started = Date.now();
    const result = await runProgram(script, (script === API ? apiEnv : env)({ RABBITMQ_URL: url.toString(), PORT: '0', AUTH_JWT_SECRET: 'x'.repeat(40) }));
    // Not retried until the start deadline (BROKER_START_DEADLINE_MS, 30 s): the process's own start is in this, up to 7.7 s under CI's load.
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(result.code).toBe(1);
    const lower = name === 'API' ? 'api' : 'dispatcher';
    expect(result.stderr).toContain(`${lower} could not start: RabbitMQ refused the login (ACCESS_REFUSED) at amqp://${url.username}:***@${url.host}`);
    expect(result.stderr).toContain('RABBITMQ_URL');
    expect(result.stderr + result.stdout).not.toContain(password);
  });

  it('answers /healthz 200 and /readyz 503 saying what it waits for until it takes deliveries', async () => {
    // RabbitMQ is not there yet: the address refuses until the proxy listens on it.
    const brokerPort = await freePort();
    const metricsPort = await freePort();
    const url = new URL(brokerUrl());
    url.hostname = '127.0.0.1';
    url.port = String(brokerPort);
    const program = startProgram(DISPATCHER, env({ RABBITMQ_URL: url.toString(), METRICS_PORT: String(metricsPort), LOG_LEVEL: 'info' }));
    let proxy: FrozenProxy | undefined;
    const get = async (path: string) => {
      const response = await fetch(`http://127.0.0.1:${metricsPort}${path}`);
      return { status: response.status, body: (await response.json()) as { status: string; waitingFor?: string } };
    };
    try {
      await waitFor('metrics port up', () => get('/healthz').then((r) => r.status === 200, () => false), 30_000);
      // The merchant database first (its rows load while the broker is tried), then RabbitMQ, which is not there.
      const seen = new Set<string>();
      await waitFor('/readyz waiting for RabbitMQ', async () => {
        const ready = await get('/readyz');
        seen.add(JSON.stringify(ready));
        return ready.body.waitingFor === 'RabbitMQ';
      }, 30_000);
      const states = [...seen].map((each) => JSON.parse(each));
      expect(states.filter((each) => each.body.waitingFor !== 'the merchant database')).toEqual([{ status: 503, body: { status: 'not ready', waitingFor: 'RabbitMQ' } }]);
      expect(program.output.stdout).not.toContain('dispatcher consuming');

      proxy = await FrozenProxy.start(brokerUrl(), brokerPort);
      await waitFor('dispatcher consuming', () => program.output.stdout.includes('dispatcher consuming'), 30_000);
      expect(await get('/readyz')).toEqual({ status: 200, body: { status: 'ready' } });
      program.child.kill('SIGTERM');
      expect((await program.finished).code).toBe(0);
    } finally {
      if (program.child.exitCode === null) program.child.kill('SIGKILL');
      await proxy?.close();
    }
  }, 120_000);

  it('says which port METRICS_PORT=0 gave the recorder, whose /readyz answers 200 there once connected, and whose webhooks_broker_connected says when it loses RabbitMQ', async () => {
    const RECORDER = 'dist/apps/recorder/main.js';
    const proxy = await FrozenProxy.start(brokerUrl());
    const program = startProgram(RECORDER, { RABBITMQ_URL: proxy.url, TOPOLOGY_PREFIX: prefix, DATABASE_URL: db.url, METRICS_PORT: '0', QUORUM_GROUP_SIZE: '1', STREAM_CLUSTER_SIZE: '1', LOG_LEVEL: 'info' });
    try {
      // Like the dispatcher's "dispatcher metrics listening": else "0: a free one" is a port nobody can find.
      const port = await waitFor('the recorder naming its metrics port', () => {
        if (program.child.exitCode !== null) throw new Error(`the recorder exited: ${program.output.stderr}`);
        const line = program.output.stdout.split('\n').find((l) => l.includes('"recorder metrics listening"'));
        return line && (JSON.parse(line) as { port: number }).port;
      }, 30_000);
      await waitFor('/readyz 200', async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200, 30_000, 100);
      // WebhooksBrokerDisconnected reads this series of every program: a recorder cut off from
      // RabbitMQ stores nothing, and without it the alert stayed silent for the recorder alone.
      const connected = async () => /^webhooks_broker_connected\{program="recorder"\} (\d)$/m.exec(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text())?.[1];
      expect(await connected()).toBe('1');
      await proxy.close();
      await waitFor('webhooks_broker_connected 0', async () => (await connected()) === '0', 30_000, 100);
      program.child.kill('SIGTERM');
      expect((await program.finished).code).toBe(0);
    } finally {
      if (program.child.exitCode === null) program.child.kill('SIGKILL');
      await proxy.close();
    }
  }, 90_000);

  it('stops on a promise rejection nothing handles as on SIGTERM: one line naming it, the delivery in flight finished and acked, exit 1', async () => {
    const receiver = await Receiver.start(() => 'hang');
    const own = uniquePrefix('startup-rejection');
    await seedMerchants(db.url, [testMerchant('m_rejection', receiver.url)]);
    const program = startProgram(DISPATCHER, env({
      TOPOLOGY_PREFIX: own,
      ALLOW_PRIVATE_TARGETS: 'true',
      LOG_LEVEL: 'info',
      NODE_OPTIONS: `--import=${resolve('test/support/reject-on-sigusr2.mjs')}`,
    }));
    try {
      await waitFor('dispatcher consuming', () => program.output.stdout.includes('dispatcher consuming'), 30_000);
      await test.publishRaw(`${own}.dispatch`, Buffer.from(JSON.stringify(sampleEvent('payout', 'm_rejection'))), { persistent: true, contentType: 'application/json', messageId: 'evt_rejection_1' });
      await waitFor('the delivery in flight', () => receiver.held === 1, 10_000);
      program.child.kill('SIGUSR2');
      const line = await waitFor('the rejection logged', () => {
        const found = program.output.stdout.split('\n').find((l) => l.includes('unhandled promise rejection'));
        if (!found && program.child.exitCode !== null) throw new Error(`the dispatcher exited ${program.child.exitCode} without it: ${program.output.stderr}`);
        return found;
      }, 10_000);
      expect(JSON.parse(line)).toMatchObject({ level: 'error', service: 'dispatcher', error: 'provoked by the test', kind: 'Error', code: 'E_PROVOKED' });
      // Draining, as on SIGTERM: it waits for the merchant's answer instead of dying with the delivery unacked.
      expect(program.child.exitCode).toBeNull();
      receiver.answerHeld(204);
      const result = await finishedWithin(program, 30_000);
      expect(result?.code).toBe(1);
      expect(receiver.requests).toHaveLength(1);
      expect(await test.messageCount(`${own}.dispatch`)).toBe(0);
      expect(result!.stdout + result!.stderr).not.toContain('hunter2');
    } finally {
      if (program.child.exitCode === null) program.child.kill('SIGKILL');
      await receiver.close();
      await test.deleteTopology(own);
    }
  }, 90_000);

  it('answers /readyz 503 (stopping) from the moment a SIGTERM starts the drain, /healthz still 200, until it exits', async () => {
    const receiver = await Receiver.start(() => 'hang');
    const own = uniquePrefix('startup-draining');
    const metricsPort = await freePort();
    await seedMerchants(db.url, [testMerchant('m_draining', receiver.url)]);
    const program = startProgram(DISPATCHER, env({ TOPOLOGY_PREFIX: own, ALLOW_PRIVATE_TARGETS: 'true', METRICS_PORT: String(metricsPort), LOG_LEVEL: 'info' }));
    const get = async (path: string) => {
      const response = await fetch(`http://127.0.0.1:${metricsPort}${path}`);
      return { status: response.status, body: await response.json() };
    };
    try {
      await waitFor('dispatcher consuming', () => program.output.stdout.includes('dispatcher consuming'), 30_000);
      await test.publishRaw(`${own}.dispatch`, Buffer.from(JSON.stringify(sampleEvent('payout', 'm_draining'))), { persistent: true, contentType: 'application/json', messageId: 'evt_draining_1' });
      await waitFor('the delivery in flight', () => receiver.held === 1, 10_000);
      expect(await get('/readyz')).toEqual({ status: 200, body: { status: 'ready' } });
      program.child.kill('SIGTERM');
      await waitFor('shutting down', () => program.output.stdout.includes('shutting down'), 10_000);
      // The delivery holds the drain: the port answers, and says the program takes nothing new.
      expect(await get('/readyz')).toEqual({ status: 503, body: { status: 'not ready', stopping: true } });
      expect((await get('/healthz')).status).toBe(200);
      receiver.answerHeld(204);
      expect((await finishedWithin(program, 30_000))?.code).toBe(0);
    } finally {
      if (program.child.exitCode === null) program.child.kill('SIGKILL');
      await receiver.close();
      await test.deleteTopology(own);
    }
  }, 90_000);

  it("answers the API's METRICS_PORT /readyz 503 (stopping) while a SIGTERM's drain waits for a request in flight", async () => {
    const program = startProgram(API, apiEnv({ LOG_LEVEL: 'info', PORT: '0', METRICS_PORT: '0', AUTH_JWT_SECRET: 'x'.repeat(40) }));
    let socket: Socket | undefined;
    try {
      const line = await waitFor('listening', () => program.output.stdout.split('\n').find((l) => l.includes('"api listening"')), 30_000);
      const { port, metricsPort } = JSON.parse(line) as { port: number; metricsPort: number };
      const readyz = async () => {
        const response = await fetch(`http://127.0.0.1:${metricsPort}/readyz`);
        return { status: response.status, body: await response.json() };
      };
      await waitFor('ready', async () => (await readyz()).status === 200, 30_000, 100);
      // A request whose body is still coming: the drain waits for it.
      socket = connect(port, '127.0.0.1');
      await once(socket, 'connect');
      socket.write('POST /nucleus/tnx/webhook?reference=r HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":');
      program.child.kill('SIGTERM');
      await waitFor('shutting down', () => program.output.stdout.includes('shutting down'), 10_000);
      expect(await readyz()).toEqual({ status: 503, body: { status: 'not ready', stopping: true } });
      socket.destroy();
      expect((await finishedWithin(program, 30_000))?.code).toBe(0);
    } finally {
      socket?.destroy();
      if (program.child.exitCode === null) program.child.kill('SIGKILL');
    }
  }, 90_000);

  it('exits 0 within SHUTDOWN_TIMEOUT on SIGTERM when the broker stops answering', async () => {
    const proxy = await FrozenProxy.start(brokerUrl());
    const program = startProgram(DISPATCHER, env({ RABBITMQ_URL: proxy.url, SHUTDOWN_TIMEOUT: '3s', LOG_LEVEL: 'info' }));
    try {
      await waitFor('dispatcher consuming', () => program.output.stdout.includes('dispatcher consuming'), 30_000);
      // Nothing passes any more: no cancel-ok, no close-ok, no heartbeat for the next 30 s.
      proxy.freeze();
      const signalledAt = Date.now();
      program.child.kill('SIGTERM');
      const result = await finishedWithin(program, 10_000);
      expect(result).toBeDefined();
      // SHUTDOWN_TIMEOUT (3 s) and the process's exit, against the 30 s a frozen broker would hold it.
      expect(Date.now() - signalledAt).toBeLessThan(7_000);
      expect(result!.code).toBe(0);
      expect(result!.stdout).toContain('shutdown step did not finish in time');
    } finally {
      if (program.child.exitCode === null) program.child.kill('SIGKILL');
      await proxy.close();
    }
  }, 90_000);
});

describe('the API with PostgreSQL down at start-up', () => {
  const prefix = uniquePrefix('startup-pg-down');
  let server: PrivatePostgres | undefined;
  let test: TestBroker;

  beforeAll(async () => {
    test = await TestBroker.open();
    server = await PrivatePostgres.start();
  });

  afterAll(async () => {
    await server?.stop();
    await test.deleteTopology(prefix);
    await test.close();
  });

  it('waits for the database (where it exited at once, code 13, with nothing said) and serves once it is up', async () => {
    expect(server).toBeDefined(); // PostgreSQL's server binaries (PG_BIN_DIR) are needed
    await server!.crash();
    const port = await freePort();
    const api = startProgram(API, {
      RABBITMQ_URL: brokerUrl(),
      TOPOLOGY_PREFIX: prefix,
      WEBHOOKS_DEV: 'true',
      DATABASE_URL: server!.url,
      PORT: String(port),
      RETRY_SCHEDULE: '',
      QUORUM_GROUP_SIZE: '1',
      STREAM_CLUSTER_SIZE: '1',
    });
    try {
      await waitFor('the warning', () => api.output.stdout.includes('database unreachable at start-up; waiting for it') || api.child.exitCode !== null, 20_000);
      expect(api.child.exitCode).toBeNull();
      // Alive while it waits: a liveness probe must not restart it; not ready, saying for what.
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
      expect({ status: ready.status, body: await ready.json() }).toMatchObject({ status: 503, body: { status: 'not ready', database: 'unreachable', waitingFor: 'PostgreSQL' } });
      await server!.up();
      await waitFor(
        'the API ready',
        async () => {
          if (api.child.exitCode !== null) throw new Error(`the API exited with ${api.child.exitCode}: ${api.output.stdout}${api.output.stderr}`);
          return (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.status === 200;
        },
        60_000,
        200,
      );
    } finally {
      api.child.kill('SIGTERM');
      await finishedWithin(api, 10_000);
    }
  });
});
