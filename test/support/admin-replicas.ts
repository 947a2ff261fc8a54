import type { ApiProgram } from '../../apps/api/program.js';
import type { DispatcherProgram } from '../../apps/dispatcher/program.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { adminToken, type Answer, call, startTestApi, waitReady } from './api.js';
import { TestBroker, uniquePrefix } from './broker.js';
import { startDatabaseDispatcher, TEST_SECRETS_KEY } from './dispatcher-program.js';
import { createTestDatabase, type TestDatabase } from './postgres.js';
import { Receiver } from './receiver.js';

/** Merchants in PostgreSQL, not a file, sealed with the tests' key. */
export const DATABASE_DIRECTORY: Record<string, string | undefined> = { SECRETS_KEY: TEST_SECRETS_KEY };
/** Development mode with private targets allowed: merchants can point at the local receiver. */
export const DEV_REPLICA: Record<string, string | undefined> = { ...DATABASE_DIRECTORY, WEBHOOKS_DEV: 'true', ALLOW_PRIVATE_TARGETS: 'true' };

/** Two API replicas on one merchants database, a dispatcher on it, and a receiver merchants can point at. */
export interface AdminReplicas {
  readonly prefix: string;
  readonly db: TestDatabase;
  readonly receiver: Receiver;
  readonly apiA: ApiProgram;
  readonly apiB: ApiProgram;
  readonly dispatcher: DispatcherProgram;
  readonly publisher: EventPublisher;
  /** An admin token's headers (webhooks:admin), with a JSON content type. */
  readonly auth: Record<string, string>;
  /** Replica A's environment, its database included: for a test that starts one more like it. */
  readonly envA: Record<string, string | undefined>;
  /** Stops replica B and starts it again (with envB): it loads everything from PostgreSQL. */
  restartB(): Promise<ApiProgram>;
  /** An admin call: `path` from the root (`/admin/merchants/…`), the body as JSON. */
  send(api: ApiProgram, method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Answer>;
}

/** An answer's `data`, and its status with its error code. */
export const data = (answer: Answer) => (answer.body as { data: Record<string, any> }).data;
export const code = (answer: Answer) => [answer.status, (answer.body as { error: { code: string } | null }).error?.code];

/**
 * Registers (beforeAll / afterAll) the admin API's test set-up: a topology and a database named
 * after `name`, replica A started with `envA` and replica B with `envB` (both development mode by
 * default), a database dispatcher, and a receiver answering 204.
 */
export function adminReplicas(name: string, envA: Record<string, string | undefined> = DEV_REPLICA, envB: Record<string, string | undefined> = envA): AdminReplicas {
  const prefix = uniquePrefix(name);
  const started: Partial<{ db: TestDatabase; receiver: Receiver; apiA: ApiProgram; apiB: ApiProgram; dispatcher: DispatcherProgram; publisher: EventPublisher; auth: Record<string, string> }> = {};

  beforeAll(async () => {
    const db = (started.db = await createTestDatabase(name.replace(/-/g, '_')));
    started.receiver = await Receiver.start(() => 204);
    started.apiA = await waitReady(await startTestApi(prefix, [], {}, { ...envA, DATABASE_URL: db.url }));
    started.apiB = await waitReady(await startTestApi(prefix, [], {}, { ...envB, DATABASE_URL: db.url }));
    started.dispatcher = await startDatabaseDispatcher(prefix, db.url);
    started.publisher = new EventPublisher(started.dispatcher.broker, prefix);
    started.auth = { authorization: `Bearer ${await adminToken()}`, 'content-type': 'application/json' };
  });

  afterAll(async () => {
    await started.dispatcher?.stop();
    await started.apiA?.stop();
    await started.apiB?.stop();
    await started.receiver?.close();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
    await started.db?.drop();
  });

  const get = <K extends keyof typeof started>(key: K) => {
    const value = started[key];
    if (value === undefined) throw new Error(`adminReplicas(${name}): ${key} is not started (used outside a test?)`);
    return value as NonNullable<(typeof started)[K]>;
  };
  return {
    prefix,
    get db() { return get('db'); },
    get receiver() { return get('receiver'); },
    get apiA() { return get('apiA'); },
    get apiB() { return get('apiB'); },
    get dispatcher() { return get('dispatcher'); },
    get publisher() { return get('publisher'); },
    get auth() { return get('auth'); },
    get envA() { return { ...envA, DATABASE_URL: get('db').url }; },
    async restartB() {
      await get('apiB').stop();
      started.apiB = await waitReady(await startTestApi(prefix, [], {}, { ...envB, DATABASE_URL: get('db').url }));
      return started.apiB;
    },
    send(api, method, path, body, headers = {}) {
      return call(api, path, { method, headers: { ...get('auth'), ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
    },
  };
}
