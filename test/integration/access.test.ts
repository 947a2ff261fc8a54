import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import type { ApiProgram } from '../../apps/api/program.js';
import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { call, startTestApi, token, unresolved } from '../support/api.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { startHarness, testMerchant } from '../support/harness.js';
import { TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { runProgram, startProgram } from '../support/process.js';
import { Receiver, refusedUrl } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

const API = 'dist/apps/api/main.js';
const DISPATCHER = 'dist/apps/dispatcher/main.js';
const RESEND = '/nucleus/tnx/webhook';

describe('development mode is explicit', () => {
  const prefix = uniquePrefix('access');
  const base = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'error', DELIVERY_LOG: 'off' };

  afterAll(async () => {
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
  });

  it('refuses to start the API as the Docker image runs it by default: no database, no token key, no demo secret', async () => {
    const result = await runProgram(API, { ...base, NODE_ENV: 'production' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Invalid configuration: DATABASE_URL: is required: merchants live in PostgreSQL');
  });

  it('refuses the dispatcher without a database outside development mode', async () => {
    const result = await runProgram(DISPATCHER, base);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Invalid configuration: DATABASE_URL: is required');
  });

  it('refuses the development token secret outside development mode', async () => {
    const result = await runProgram(API, { ...base, DATABASE_URL: 'postgres://u@127.0.0.1:1/none', SECRETS_KEY: TEST_SECRETS_KEY, AUTH_JWT_SECRET: 'dev-only-jwt-secret-never-use-in-production-0123456789' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Invalid configuration: AUTH_JWT_SECRET: is the development secret');
  });

  it('refuses an http AUTH_JWKS_URL outside development mode', async () => {
    const result = await runProgram(API, { ...base, DATABASE_URL: 'postgres://u@127.0.0.1:1/none', SECRETS_KEY: TEST_SECRETS_KEY, AUTH_JWKS_URL: 'http://auth.internal/.well-known/jwks.json' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('Invalid configuration: AUTH_JWKS_URL: must be https outside development mode');
  });

  it('starts with the development merchants and token secret with WEBHOOKS_DEV=true, and warns that it is development mode', async () => {
    // Its own directory for the embedded database (.data/), with the repository's development merchants.
    const cwd = mkdtempSync(join(tmpdir(), 'access-dev-'));
    symlinkSync(resolve('config'), join(cwd, 'config'));
    const program = startProgram(resolve(API), { ...base, LOG_LEVEL: 'info', WEBHOOKS_DEV: 'true' }, [], cwd);
    try {
      // Opening a new PGlite takes over 30 s on a busy machine.
      await waitFor('listening', () => program.output.stdout.includes('api listening'), 100_000);
      expect(program.output.stdout).toContain('development merchants written to the embedded database');
      expect(program.output.stdout).toMatch(/"merchants":2,"message":"merchant directory loaded"/);
      expect(program.output.stdout).toMatch(/"level":"warn".*development mode is on \(WEBHOOKS_DEV=true\)/);
    } finally {
      program.child.kill('SIGTERM');
      expect((await program.finished).code).toBe(0);
      rmSync(cwd, { recursive: true, force: true });
    }
  }, 120_000);

  it('never infers development mode from NODE_ENV=development: the production checks stand, naming the variables', async () => {
    const result = await runProgram(API, { ...base, NODE_ENV: 'development' });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/Invalid configuration: .*DATABASE_URL/);
  });
});

describe('the resend API checks tokens as configured', () => {
  let harness: Awaited<ReturnType<typeof startHarness>>;
  let jwks: Server;
  let jwksAnswer: 'keys' | 'garbage' = 'keys';
  let jwksUrl: string;
  const merchant = testMerchant('m_auth', 'https://merchant.example/hooks');
  let keys: Awaited<ReturnType<typeof generateKeyPair>>;
  let jwk: object;
  let jwksKeys: object[];

  beforeAll(async () => {
    keys = await generateKeyPair('RS256');
    jwk = { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
    jwksKeys = [jwk];
    jwks = createServer((_req, res) => {
      if (jwksAnswer === 'garbage') res.writeHead(200, { 'content-type': 'application/json' }).end('<html>not a key set</html>');
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: jwksKeys }));
    });
    jwks.listen(0, '127.0.0.1');
    await once(jwks, 'listening');
    jwksUrl = `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/jwks.json`;
    harness = await startHarness({ name: 'auth', merchants: [merchant] });
  });

  afterAll(async () => {
    await harness?.close();
    await new Promise((resolve) => jwks.close(resolve));
  });

  function rs256(claims: { iss?: string; aud?: string }): Promise<string> {
    let jwt = new SignJWT({}).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).setSubject(merchant.id).setIssuedAt().setExpirationTime('5m');
    if (claims.iss) jwt = jwt.setIssuer(claims.iss);
    if (claims.aud) jwt = jwt.setAudience(claims.aud);
    return jwt.sign(keys.privateKey);
  }

  async function api(env: Record<string, string | undefined>): Promise<ApiProgram> {
    const program = await startTestApi(harness.prefix, [], {}, { AUTH_JWT_SECRET: undefined, WEBHOOKS_DEV: 'true', ...env });
    return program;
  }

  it('checks AUTH_JWT_ISSUER and AUTH_JWT_AUDIENCE when set', async () => {
    const program = await api({ AUTH_JWKS_URL: jwksUrl, AUTH_JWT_ISSUER: 'https://auth.platform.example', AUTH_JWT_AUDIENCE: 'webhooks' });
    try {
      const send = async (jwt: string) =>
        call(program, `${RESEND}?reference=nothing-failed`, { headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${jwt}` } });
      expect((await send(await rs256({ iss: 'https://auth.platform.example', aud: 'webhooks' }))).status).toBe(404);
      expect((await send(await rs256({ iss: 'https://evil.example', aud: 'webhooks' }))).status).toBe(401);
      expect((await send(await rs256({ iss: 'https://auth.platform.example', aud: 'billing' }))).status).toBe(401);
      expect((await send(await rs256({}))).status).toBe(401);
    } finally {
      await program.stop();
    }
  });

  it('takes a token without kid signed by either key while the JWKS holds the old and the new one (a rotation)', async () => {
    const next = await generateKeyPair('RS256');
    const stranger = await generateKeyPair('RS256');
    const withoutKid = async (key: typeof keys.publicKey) => ({ ...(await exportJWK(key)), alg: 'RS256', use: 'sig' });
    jwksKeys = [await withoutKid(keys.publicKey), await withoutKid(next.publicKey)];
    const program = await api({ AUTH_JWKS_URL: jwksUrl });
    try {
      const send = async (signer: typeof keys.privateKey, expiresAt: string | number = '5m') => {
        const jwt = await new SignJWT({}).setProtectedHeader({ alg: 'RS256' }).setSubject(merchant.id).setExpirationTime(expiresAt).sign(signer);
        return call(program, `${RESEND}?reference=nothing-failed`, { headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${jwt}` } });
      };
      expect((await send(keys.privateKey)).body).toMatchObject({ error: { code: 'not_found', status: 404 } });
      expect((await send(next.privateKey)).body).toMatchObject({ error: { code: 'not_found', status: 404 } });
      expect((await send(stranger.privateKey)).body).toMatchObject({ error: { code: 'invalid_credentials', status: 401 }, data: null });
      expect((await send(next.privateKey, Math.floor(Date.now() / 1000) - 60)).body).toMatchObject({ error: { code: 'token_expired', status: 401 } });
    } finally {
      jwksKeys = [jwk];
      await program.stop();
    }
  });

  it.each([
    ['answers garbage', async () => ((jwksAnswer = 'garbage'), jwksUrl)],
    ['is unreachable', async () => refusedUrl()],
  ])('answers 503 auth_unavailable, not 401, when the JWKS %s', async (_name, url) => {
    const program = await api({ AUTH_JWKS_URL: await url() });
    try {
      const answer = await call(program, `${RESEND}?reference=nothing-failed`, {
        headers: { 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await rs256({})}` },
      });
      expect(answer.status).toBe(503);
      expect(answer.body).toMatchObject({ error: { code: 'auth_unavailable', status: 503 }, data: null });
    } finally {
      jwksAnswer = 'keys';
      await program.stop();
    }
  });
});

describe('rate limit, metrics port and references', () => {
  let receiver: Receiver;
  let harness: Awaited<ReturnType<typeof startHarness>>;
  const merchant = testMerchant('m_refs', 'http://placeholder');
  // Its own merchant: the count is PostgreSQL's, shared by every API on the database, so a merchant
  // it refused would be refused by the next test's API too.
  const limited = testMerchant('m_limited', 'https://merchant.example/hooks');

  beforeAll(async () => {
    receiver = await Receiver.start((n) => (n === 0 ? 500 : 200));
    merchant.endpoints[0]!.url = receiver.url;
    harness = await startHarness({ name: 'refs', merchants: [merchant, limited] });
  });

  afterAll(async () => {
    await harness?.close();
    await receiver?.close();
  });

  const auth = async () => ({ 'x-auth-token': merchant.publicKey, authorization: `Bearer ${await token(merchant.id)}` });

  it('limits resends per merchant to RESEND_RATE_LIMIT', async () => {
    const program = await startTestApi(harness.prefix, [], { rateLimit: undefined }, { RESEND_RATE_LIMIT: '2,2' });
    try {
      const statuses = [];
      const headers = { 'x-auth-token': limited.publicKey, authorization: `Bearer ${await token(limited.id)}` };
      for (let i = 0; i < 3; i++) statuses.push((await call(program, `${RESEND}?reference=r${i}`, { headers })).status);
      expect(statuses).toEqual([404, 404, 429]);
    } finally {
      await program.stop();
    }
  });

  it('serves /metrics on METRICS_PORT and not on the public port when it is set', async () => {
    const program = await startTestApi(harness.prefix, [], {}, { METRICS_PORT: '0' });
    try {
      expect(program.metricsPort).toBeGreaterThan(0);
      expect((await call(program, '/metrics', { method: 'GET' })).status).toBe(404);
      const metrics = await fetch(`http://127.0.0.1:${program.metricsPort}/metrics`);
      expect(metrics.status).toBe(200);
      expect(await metrics.text()).toContain('webhooks_broker_connected');
    } finally {
      await program.stop();
    }
  });

  it('resends a webhook whose reference has spaces and non-ASCII characters: intake and API take the same set', async () => {
    const program = await startTestApi(harness.prefix);
    try {
      const reference = 'PO 2026/ü-0001';
      const message = sampleEvent('payout', merchant.id);
      message.data.reference = reference;
      await harness.publisher.publish(message);
      await waitFor('failed and indexed', async () => (await unresolved(program, merchant.id, reference)) === 1, 10_000);
      const answer = await call(program, `${RESEND}?reference=${encodeURIComponent(reference)}`, { headers: await auth() });
      expect(answer.status).toBe(200);
      await receiver.waitForRequests(2);
    } finally {
      await program.stop();
    }
  });

  it('parks an event whose reference has a control character, which no resend could name', async () => {
    const message = sampleEvent('payout', merchant.id);
    message.data.reference = 'PO-1\u0007';
    await harness.publisher.publish(message);
    const [parked] = await harness.test.drain(harness.names.invalid, 1);
    expect(parked!.properties.headers?.[HEADERS.invalidCode]).toBe('missing-reference');
  });
});
