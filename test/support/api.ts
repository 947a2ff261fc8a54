import Ajv2020 from 'ajv/dist/2020.js';
import { SignJWT } from 'jose';
import { openApiDocument } from '../../apps/api/openapi.js';
import { loadApiConfig } from '../../apps/api/config.js';
import { type ApiOptions, type ApiProgram, startApi } from '../../apps/api/program.js';
import { HEADERS } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { seedMerchants, TEST_SECRETS_KEY } from './merchant-rows.js';
import { brokerUrl } from './broker.js';
import { createTestDatabase, databaseOf, type TestDatabase } from './postgres.js';
import { freePort } from './receiver.js';
import { waitFor } from './wait.js';

export const JWT_SECRET = 'test-jwt-secret-that-is-long-enough-0123456789';

/**
 * An API on `prefix`, merchants in its database (the harness's for this prefix, else one of its
 * own, or env's DATABASE_URL), `merchants` written there first (seedMerchants; none: what it holds).
 */
export async function startTestApi(
  prefix: string,
  merchants: Merchant[] = [],
  options: ApiOptions = {},
  env: Record<string, string | undefined> = {},
): Promise<ApiProgram> {
  // The failure index is in PostgreSQL: the harness's database for this prefix, else one of its own.
  let own: TestDatabase | undefined;
  let databaseUrl = 'DATABASE_URL' in env ? env.DATABASE_URL : databaseOf(prefix);
  if (databaseUrl === undefined && !('DATABASE_URL' in env)) {
    own = await createTestDatabase('api');
    databaseUrl = own.url;
  }
  // Outside development mode the portal's links need PORTAL_PUBLIC_URL: the port is picked first,
  // so that the URL names the API's own address (http on loopback, as a one-machine demo).
  const development = env.WEBHOOKS_DEV === 'true';
  let port = env.PORT ?? '0';
  let portal: Record<string, string> = {};
  if (!development && !('PORTAL_PUBLIC_URL' in env)) {
    if (port === '0') port = String(await freePort());
    portal = { PORTAL_PUBLIC_URL: `http://127.0.0.1:${port}` };
  }
  const config = loadApiConfig({
    RABBITMQ_URL: brokerUrl(),
    DATABASE_URL: databaseUrl,
    TOPOLOGY_PREFIX: prefix,
    PORT: port,
    ...portal,
    SECRETS_KEY: TEST_SECRETS_KEY,
    RETRY_SCHEDULE: '',
    FAILED_RETENTION: '1D',
    AUTH_JWT_SECRET: JWT_SECRET,
    // The delivery log's tests turn it on with their own database.
    DELIVERY_LOG: 'off',
    ...env,
  });
  let api: ApiProgram;
  try {
    if (merchants.length > 0) await seedMerchants(databaseUrl!, merchants);
    // Tests make many sessions from 127.0.0.1: the per-address limit is tested where a test asks for it.
    api = await startApi(config, silentLogger(), {
      rateLimit: { perMinute: 6_000, burst: 1_000 },
      logRateLimit: { perMinute: 60_000, burst: 10_000 },
      portalAddressLimit: { perMinute: 6_000, burst: 1_000 },
      ...options,
    });
  } catch (err) {
    await own?.drop();
    throw err;
  }
  if (own) {
    const stop = api.stop.bind(api);
    let dropped: Promise<void> | undefined;
    api.stop = () => (dropped ??= stop().finally(() => own.drop()));
  }
  return api;
}

/**
 * Waits for /readyz to answer 200. With the broker directory, an API answers its merchant routes 503
 * until it has read the merchants' stream: a test that asks at once can meet that on a slow machine.
 */
export async function waitReady(api: ApiProgram, timeoutMs = 10_000): Promise<ApiProgram> {
  await waitFor('API ready', async () => (await fetch(`http://127.0.0.1:${api.port}/readyz`)).status === 200, timeoutMs, 50);
  return api;
}

export function token(sub: string, options: { secret?: string; expiresIn?: string | number; notBefore?: number } = {}): Promise<string> {
  const jwt = new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(sub).setIssuedAt().setExpirationTime(options.expiresIn ?? '5m');
  if (options.notBefore !== undefined) jwt.setNotBefore(options.notBefore);
  return jwt.sign(new TextEncoder().encode(options.secret ?? JWT_SECRET));
}

/** A token of the dashboard's backend (or an operator): its scope names what it may do. */
export function adminToken(scope = 'webhooks:admin', sub = 'dashboard-backend'): Promise<string> {
  return new SignJWT({ scope })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(sub)
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(new TextEncoder().encode(JWT_SECRET));
}

export interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

/** Every answer the tests saw, so the OpenAPI test can check each against the document. */
export const seen: Array<{ path: string; method: string } & Answer> = [];

export async function call(
  api: ApiProgram,
  path: string,
  init: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  const method = init.method ?? 'POST';
  const res = await fetch(`http://127.0.0.1:${api.port}${path}`, { method, headers: init.headers, body: init.body });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // left as text: the test asserts on it
  }
  const answer = { status: res.status, headers: res.headers, body };
  seen.push({ path: path.split('?')[0]!, method: method.toLowerCase(), ...answer });
  return answer;
}

type Operation = { responses: Record<string, unknown> };

/** The document's operation for a concrete path: `/admin/merchants/m_1` matches `/admin/merchants/{merchantId}`. */
function operationFor(path: string, method: string): { template: string; operation: Operation } | undefined {
  for (const [template, item] of Object.entries(openApiDocument.paths as unknown as Record<string, Record<string, Operation>>)) {
    const pattern = new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`);
    if (pattern.test(path) && item[method]) return { template, operation: item[method]! };
  }
  return undefined;
}

/**
 * Checks every answer a test file saw against the OpenAPI document: its status is documented for
 * that operation and its body matches the schema. Returns "template status" pairs seen.
 */
export function expectDocumented(answers: typeof seen): Set<string> {
  const ajv = new Ajv2020.default({ strict: false });
  ajv.addSchema({ $id: 'openapi.json', components: openApiDocument.components });
  const statuses = new Set<string>();
  for (const answer of answers) {
    const found = operationFor(answer.path, answer.method);
    if (!found) continue; // unknown routes and methods are not operations
    const response = found.operation.responses[String(answer.status)] as { content: { 'application/json': { schema: object } } } | undefined;
    expect({ path: answer.path, status: answer.status, documented: response !== undefined }).toEqual({ path: answer.path, status: answer.status, documented: true });
    const schema = JSON.parse(JSON.stringify(response!.content['application/json'].schema).replaceAll('"#/components', '"openapi.json#/components'));
    const validate = ajv.compile(schema);
    expect({ status: answer.status, body: answer.body, valid: validate(answer.body), errors: validate.errors ?? null }).toMatchObject({ valid: true });
    statuses.add(`${found.template} ${answer.status}`);
  }
  return statuses;
}

/** How many of the merchant's failures for `reference` are in the failure index and not resent. */
export async function unresolved(api: ApiProgram, merchantId: string, reference: string): Promise<number> {
  return (await api.failures.list({ merchantId, reference, unresolvedOnly: true, limit: 1_000 })).length;
}

/** Indexes a failure of `message` (its webhook `webhookId`) as the dispatcher does once it is in `failed`. */
export async function indexFailure(api: ApiProgram, message: { merchantId: string; event: string; data: Record<string, unknown> }, webhookId: string, reference: string, endpointId: string): Promise<void> {
  await api.failures.record({
    merchantId: message.merchantId,
    webhookId,
    endpointId,
    failedAt: new Date(),
    event: message.event,
    references: [reference],
    reason: 'attempts-exhausted',
    attempts: 1,
    content: JSON.stringify(message),
    headers: { [HEADERS.merchantId]: message.merchantId, [HEADERS.reference]: reference, [HEADERS.event]: message.event, [HEADERS.webhookId]: webhookId },
  });
}
