import { readFileSync } from 'node:fs';
import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { loadApiConfig } from '../../apps/api/config.js';
import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { ConfigError, DEV_SECRETS_KEY, devModeWarning, parseDuration, withDevDefaults } from '../../libs/config/index.js';

describe('development mode', () => {
  it('is on only with WEBHOOKS_DEV=true, never inferred from NODE_ENV, and warned about whenever it is on', () => {
    expect(withDevDefaults({ NODE_ENV: 'development' })).toEqual({ env: { NODE_ENV: 'development' }, dev: false });
    expect(devModeWarning({ NODE_ENV: 'development' })?.message).toContain('NODE_ENV=development does not switch development mode on');
    expect(withDevDefaults({ WEBHOOKS_DEV: 'true' }).dev).toBe(true);
    expect(devModeWarning({ WEBHOOKS_DEV: 'true', DATABASE_URL: 'postgres://db.internal/webhooks' })).toEqual({
      message: expect.stringMatching(/^development mode is on \(WEBHOOKS_DEV=true\) against DATABASE_URL: .*private addresses.*never in production$/),
      fields: { databaseUrlSet: true },
    });
    expect(devModeWarning({})).toBeUndefined();
  });
});

describe('durations', () => {
  it.each([
    ['200ms', 200],
    ['5s', 5_000],
    ['5m', 300_000],
    ['2h', 7_200_000],
    ['1d', 86_400_000],
    ['1.5s', 1_500],
  ])('reads %s as %d ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(['', '5', 's', '5 sec', '-5s', '5S', '1w'])('refuses %j', (text) => {
    expect(parseDuration(text)).toBeUndefined();
  });
});

describe('dispatcher configuration', () => {
  /** Merchants in PostgreSQL, as every deployment has them. */
  const stored = { DATABASE_URL: 'postgres://localhost/webhooks', SECRETS_KEY: Buffer.alloc(32, 7).toString('base64') };

  it('starts from the documented defaults', () => {
    const config = loadDispatcherConfig(stored);
    expect(config).toMatchObject({
      RABBITMQ_URL: ['amqp://guest:guest@127.0.0.1:5672'],
      TOPOLOGY_PREFIX: 'webhooks',
      QUORUM_GROUP_SIZE: 3,
      STREAM_CLUSTER_SIZE: 3,
      RETRY_SCHEDULE: [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
      DELIVERY_TIMEOUT_MS: 10_000,
      FAILED_RETENTION: '30D',
      ALLOW_PRIVATE_TARGETS: false,
      LOG_LEVEL: 'info',
    });
  });

  it('bounds MAX_MESSAGE_BYTES so that the largest delivery record fits a RabbitMQ 4 message (16 MiB by default), naming the variable', () => {
    // Its record escapes the body into the deliveries stream: past 16 MiB a RabbitMQ 4 broker closes the publishing channel.
    expect(() => loadDispatcherConfig({ ...stored, MAX_MESSAGE_BYTES: String(16 * 1024 * 1024) })).toThrow('Invalid configuration: MAX_MESSAGE_BYTES: ');
    const most = 4 * 1024 * 1024;
    expect(loadDispatcherConfig({ ...stored, MAX_MESSAGE_BYTES: String(most) }).MAX_MESSAGE_BYTES).toBe(most);
    expect(() => loadDispatcherConfig({ ...stored, MAX_MESSAGE_BYTES: String(most + 1) })).toThrow(`must be a whole number from 1 to ${most}`);
    // The worst case: a body all escaped quotes (twice its bytes escaped) and the longest kept answer all
    // control characters (six times), after records up to the writer's batch bound (1 MiB as it counts them) of the same.
    const body = `["${'\\"'.repeat((most - 4) / 2)}"]`;
    expect(Buffer.byteLength(body)).toBe(most);
    const answer = '\u0001'.repeat(64 * 1024);
    const record = (payload: string) => ({ id: 'x'.repeat(36), at: new Date().toISOString(), webhookId: 'w'.repeat(200), merchantId: 'm'.repeat(200), endpointId: 'e'.repeat(200), event: 'e'.repeat(100), references: Array(4).fill('r'.repeat(200)), payload, firstSeenAt: new Date().toISOString(), outcome: 'failed', attemptNumber: 1, attempt: { startedAt: new Date().toISOString(), durationMs: 1, httpStatus: 500, error: 'x'.repeat(1000), responseBody: answer } });
    const before = Array.from({ length: 15 }, () => record(`["${'\\"'.repeat(2_000)}"]`));
    expect(Buffer.byteLength(JSON.stringify([...before, record(body)]))).toBeLessThan(16 * 1024 * 1024);
  });

  it('reads RABBITMQ_URL as the list of a cluster\'s nodes', () => {
    expect(loadDispatcherConfig({ ...stored, RABBITMQ_URL: 'amqp://u:p@n1:5672, amqp://u:p@n2:5672,amqps://u:p@n3' }).RABBITMQ_URL).toEqual([
      'amqp://u:p@n1:5672',
      'amqp://u:p@n2:5672',
      'amqps://u:p@n3',
    ]);
  });

  it('needs DATABASE_URL and SECRETS_KEY for merchants in PostgreSQL, and never the development key outside development mode', () => {
    const key = Buffer.alloc(32, 1);
    const database = { DATABASE_URL: 'postgres://u@db/webhooks' };
    expect(loadDispatcherConfig({ ...database, SECRETS_KEY: key.toString('base64') }).SECRETS_KEY).toEqual(key);
    expect(loadDispatcherConfig({ ...database, SECRETS_KEY: key.toString('hex') }).SECRETS_KEY).toEqual(key);
    expect(() => loadDispatcherConfig({})).toThrow('DATABASE_URL: is required: merchants live in PostgreSQL');
    expect(() => loadDispatcherConfig(database)).toThrow('SECRETS_KEY: is required');
    expect(() => loadDispatcherConfig({ ...database, SECRETS_KEY: 'c2hvcnQ=' })).toThrow('SECRETS_KEY: must be 32 random bytes');
    expect(() => loadDispatcherConfig({ ...database, SECRETS_KEY: key.toString('base64'), SECRETS_KEY_PREVIOUS: 'nope' })).toThrow('SECRETS_KEY_PREVIOUS: must be 32 random bytes');
    expect(() => loadDispatcherConfig({ ...database, SECRETS_KEY: DEV_SECRETS_KEY })).toThrow('SECRETS_KEY: is the development key');
    expect(loadDispatcherConfig({ ...database, SECRETS_KEY: DEV_SECRETS_KEY, WEBHOOKS_DEV: 'true' }).WEBHOOKS_DEV).toBe(true);
  });

  it('reads the operational events settings: ENDPOINT_DISABLE_AFTER (0 never), the interval, and a secret with the URL', () => {
    expect(loadDispatcherConfig(stored)).toMatchObject({ ENDPOINT_DISABLE_AFTER: 5 * 86_400_000, OPERATIONAL_EVENT_INTERVAL: 3_600_000 });
    expect(loadDispatcherConfig({ ...stored, ENDPOINT_DISABLE_AFTER: '0' }).ENDPOINT_DISABLE_AFTER).toBe(0);
    expect(loadDispatcherConfig({ ...stored, ENDPOINT_DISABLE_AFTER: '12h' }).ENDPOINT_DISABLE_AFTER).toBe(43_200_000);
    expect(() => loadDispatcherConfig({ ...stored, ENDPOINT_DISABLE_AFTER: 'never' })).toThrow('ENDPOINT_DISABLE_AFTER: "never" is not a duration (use e.g. 5d, 12h) or 0 for never');
    expect(() => loadDispatcherConfig({ ...stored, OPERATIONAL_EVENT_INTERVAL: '0' })).toThrow('OPERATIONAL_EVENT_INTERVAL');
    expect(() => loadDispatcherConfig({ ...stored, OPERATIONAL_WEBHOOK_URL: 'https://platform.example/ops' })).toThrow('OPERATIONAL_WEBHOOK_SECRET: is required when OPERATIONAL_WEBHOOK_URL is set');
    expect(() => loadDispatcherConfig({ ...stored, OPERATIONAL_WEBHOOK_URL: 'ftp://platform.example', OPERATIONAL_WEBHOOK_SECRET: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' })).toThrow('OPERATIONAL_WEBHOOK_URL');
    expect(() => loadDispatcherConfig({ ...stored, OPERATIONAL_WEBHOOK_URL: 'https://platform.example/ops', OPERATIONAL_WEBHOOK_SECRET: 'hunter2' })).toThrow('OPERATIONAL_WEBHOOK_SECRET: must be whsec_');
    expect(loadDispatcherConfig({ ...stored, OPERATIONAL_WEBHOOK_URL: 'https://platform.example/ops', OPERATIONAL_WEBHOOK_SECRET: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' }).OPERATIONAL_WEBHOOK_URL).toBe('https://platform.example/ops');
  });

  it('reads WAIT_LEASE as a duration, naming the variable when it is not one', () => {
    expect(loadDispatcherConfig(stored).WAIT_LEASE).toBe(60_000);
    expect(loadDispatcherConfig({ ...stored, WAIT_LEASE: '30s' }).WAIT_LEASE).toBe(30_000);
    expect(() => loadDispatcherConfig({ ...stored, WAIT_LEASE: 'soon' })).toThrow('WAIT_LEASE');
  });

  it('reads RETRY_SCHEDULE with spaces and mixed units', () => {
    expect(loadDispatcherConfig({ ...stored, RETRY_SCHEDULE: '200ms, 5s,5m ,2h' }).RETRY_SCHEDULE).toEqual([200, 5_000, 300_000, 7_200_000]);
  });

  it('takes an empty RETRY_SCHEDULE as a single attempt', () => {
    expect(loadDispatcherConfig({ ...stored, RETRY_SCHEDULE: '' }).RETRY_SCHEDULE).toEqual([]);
    expect(loadDispatcherConfig({ ...stored, RETRY_SCHEDULE: '  ' }).RETRY_SCHEDULE).toEqual([]);
  });

  it.each([
    ['1s,,2s', 'RETRY_SCHEDULE: delay 2 of 3 is empty (two commas in a row, or a comma at an end)'],
    ['1s,2s,', 'RETRY_SCHEDULE: delay 3 of 3 is empty'],
    ['0s', 'RETRY_SCHEDULE: delay 1 of 1 is zero ("0s"): every delay must be at least 1ms, because a zero delay retries at once'],
    ['5s,0ms', 'RETRY_SCHEDULE: delay 2 of 2 is zero ("0ms")'],
    ['5', 'RETRY_SCHEDULE: "5" is not a duration (delay 1 of 1): give a number and a unit among ms, s, m, h, d'],
  ])('refuses RETRY_SCHEDULE=%j saying exactly which delay is wrong and why', (schedule, message) => {
    expect(() => loadDispatcherConfig({ ...stored, RETRY_SCHEDULE: schedule })).toThrow(message);
  });

  it.each(['RETRY_SCHEDULE', 'WAIT_LEASE', 'OPERATIONAL_EVENT_INTERVAL', 'ENDPOINT_DISABLE_AFTER', 'INTAKE_DEDUPE_WINDOW'])(
    'refuses %s past 100 years (36500d), naming it: a time computed from 999999d is out of what PostgreSQL holds',
    (variable) => {
      expect(() => loadDispatcherConfig({ ...stored, [variable]: '999999d' })).toThrow(`Invalid configuration: ${variable}: `);
      expect(() => loadDispatcherConfig({ ...stored, [variable]: '999999d' })).toThrow('longer than the most allowed, 36500d');
      expect(() => loadDispatcherConfig({ ...stored, [variable]: '36500d' })).not.toThrow();
    },
  );

  it('refuses DELIVERY_LOG_RETENTION past 100 years in the recorder and the API too (the recorder never took the lead)', () => {
    expect(() => loadRecorderConfig({ DATABASE_URL: 'postgres://db.internal/webhooks', DELIVERY_LOG_RETENTION: '999999d' })).toThrow(
      'Invalid configuration: DELIVERY_LOG_RETENTION: "999999d" is longer than the most allowed, 36500d',
    );
    expect(() => loadApiConfig({ ...stored, AUTH_JWT_SECRET: 'x'.repeat(40), PORTAL_PUBLIC_URL: 'https://webhooks.example.com', DELIVERY_LOG_RETENTION: '999999d' })).toThrow('Invalid configuration: DELIVERY_LOG_RETENTION: ');
  });

  it('refuses a SHUTDOWN_TIMEOUT past 1d, where its timers would fire at once (exit 1 on SIGTERM, in-flight webhooks sent again)', () => {
    expect(loadDispatcherConfig({ ...stored, SHUTDOWN_TIMEOUT: '1d' }).SHUTDOWN_TIMEOUT).toBe(86_400_000);
    // 30d is past Node's largest timer (2^31 - 1 ms): the stop's backstop fired at once.
    for (const value of ['25h', '30d']) {
      expect(() => loadDispatcherConfig({ ...stored, SHUTDOWN_TIMEOUT: value })).toThrow(`Invalid configuration: SHUTDOWN_TIMEOUT: "${value}" is longer than the most allowed, 1d`);
      expect(() => loadApiConfig({ ...stored, AUTH_JWT_SECRET: 'x'.repeat(40), PORTAL_PUBLIC_URL: 'https://webhooks.example.com', SHUTDOWN_TIMEOUT: value })).toThrow('Invalid configuration: SHUTDOWN_TIMEOUT: ');
    }
  });

  it.each([
    ['RETRY_SCHEDULE', '5s,soon', 'Invalid configuration: RETRY_SCHEDULE: "soon" is not a duration (delay 2 of 2): give a number and a unit'],
    ['DELIVERY_TIMEOUT_MS', '0', 'Invalid configuration: DELIVERY_TIMEOUT_MS: "0" must be a whole number from 1 to 300000'],
    ['DELIVERY_TIMEOUT_MS', '10s', 'Invalid configuration: DELIVERY_TIMEOUT_MS: "10s" must be a whole number'],
    ['DISPATCH_CONCURRENCY', '-3', 'Invalid configuration: DISPATCH_CONCURRENCY: "-3" must be a whole number'],
    ['RABBITMQ_URL', 'http://localhost', 'Invalid configuration: RABBITMQ_URL: must be an amqp:// or amqps:// URL'],
    ['RABBITMQ_URL', 'amqp://a:5672,http://b', 'Invalid configuration: RABBITMQ_URL: must be an amqp:// or amqps:// URL'],
    ['QUORUM_GROUP_SIZE', '0', 'Invalid configuration: QUORUM_GROUP_SIZE: "0" must be a whole number from 1 to 99'],
    ['STREAM_CLUSTER_SIZE', 'three', 'Invalid configuration: STREAM_CLUSTER_SIZE: "three" must be a whole number'],
    ['TOPOLOGY_PREFIX', 'has space', 'Invalid configuration: TOPOLOGY_PREFIX: must be'],
    ['FAILED_RETENTION', '7 days', 'Invalid configuration: FAILED_RETENTION: must be a RabbitMQ max-age'],
    ['ALLOW_PRIVATE_TARGETS', 'maybe', 'Invalid configuration: ALLOW_PRIVATE_TARGETS: "maybe" must be true or false'],
    ['LOG_LEVEL', 'loud', 'Invalid configuration: LOG_LEVEL: '],
  ])('refuses %s=%j with a message naming the variable', (variable, value, message) => {
    let error: unknown;
    try {
      loadDispatcherConfig({ [variable]: value });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe(variable);
    expect((error as ConfigError).message.startsWith(message)).toBe(true);
  });
});

describe('API configuration', () => {
  const base = { SECRETS_KEY: Buffer.alloc(32, 7).toString('base64'), AUTH_JWT_SECRET: 'x'.repeat(40), DELIVERY_LOG: 'off', DATABASE_URL: 'postgres://u@db/webhooks', PORTAL_PUBLIC_URL: 'https://webhooks.example.com' };

  it('needs PORTAL_PUBLIC_URL outside development mode, naming it: links never come from a request', () => {
    const { PORTAL_PUBLIC_URL: _unset, ...withoutPortal } = base;
    expect(() => loadApiConfig(withoutPortal)).toThrow('Invalid configuration: PORTAL_PUBLIC_URL: is required outside development mode');
    expect(() => loadApiConfig({ ...withoutPortal, PORTAL_PUBLIC_URL: '' })).toThrow('Invalid configuration: PORTAL_PUBLIC_URL: is required outside development mode');
    expect(loadApiConfig({ ...withoutPortal, WEBHOOKS_DEV: 'true' }).PORTAL_PUBLIC_URL).toBeUndefined();
    expect(loadApiConfig({ ...base, PORTAL_PUBLIC_URL: 'https://webhooks.example.com/' }).PORTAL_PUBLIC_URL).toBe('https://webhooks.example.com');
  });

  it('takes PORTAL_PUBLIC_URL over http outside development mode only on a loopback host (a one-machine demo)', () => {
    for (const url of ['http://localhost:8080', 'http://127.0.0.1:8080', 'http://[::1]:8080']) {
      expect(loadApiConfig({ ...base, PORTAL_PUBLIC_URL: url }).PORTAL_PUBLIC_URL).toBe(url);
    }
    for (const url of ['http://webhooks.example.com', 'http://10.0.0.5:8080', 'http://localhost.example.com', 'http://127.0.0.1.nip.io']) {
      expect(() => loadApiConfig({ ...base, PORTAL_PUBLIC_URL: url })).toThrow('Invalid configuration: PORTAL_PUBLIC_URL: must be https outside development mode');
    }
    expect(loadApiConfig({ ...base, WEBHOOKS_DEV: 'true', PORTAL_PUBLIC_URL: 'http://devbox.internal:8080' }).PORTAL_PUBLIC_URL).toBe('http://devbox.internal:8080');
  });

  it('reads MAX_ENDPOINTS_PER_MERCHANT from 1 to the row\'s hard cap of 20, 20 when unset, naming it otherwise', () => {
    expect(loadApiConfig(base).MAX_ENDPOINTS_PER_MERCHANT).toBe(20);
    expect(loadApiConfig({ ...base, MAX_ENDPOINTS_PER_MERCHANT: '3' }).MAX_ENDPOINTS_PER_MERCHANT).toBe(3);
    for (const value of ['0', '21', 'many', '2.5']) {
      expect(() => loadApiConfig({ ...base, MAX_ENDPOINTS_PER_MERCHANT: value })).toThrow(`Invalid configuration: MAX_ENDPOINTS_PER_MERCHANT: "${value}" must be a whole number from 1 to 20`);
    }
  });

  it('reads TRUST_PROXY as Express\'s trust proxy: unset by default, a hop count, or presets, addresses and CIDRs', () => {
    expect(loadApiConfig(base).TRUST_PROXY).toBeUndefined();
    expect(loadApiConfig({ ...base, TRUST_PROXY: 'false' }).TRUST_PROXY).toBeUndefined();
    expect(loadApiConfig({ ...base, TRUST_PROXY: '0' }).TRUST_PROXY).toBeUndefined();
    expect(loadApiConfig({ ...base, TRUST_PROXY: '2' }).TRUST_PROXY).toBe(2);
    expect(loadApiConfig({ ...base, TRUST_PROXY: 'loopback, 10.0.0.0/8,fd00::/8, 192.168.1.7' }).TRUST_PROXY).toEqual(['loopback', '10.0.0.0/8', 'fd00::/8', '192.168.1.7']);
  });

  it.each(['AUTH_JWT_SECRET', 'AUTH_JWT_ISSUER', 'AUTH_JWT_AUDIENCE'])('refuses %s with whitespace around it (the newline of a file), naming it: it is compared byte for byte', (variable) => {
    const value = variable === 'AUTH_JWT_SECRET' ? 'x'.repeat(40) : 'https://auth.example.com';
    expect(loadApiConfig({ ...base, [variable]: value })[variable as 'AUTH_JWT_ISSUER']).toBe(value);
    for (const padded of [`${value}\n`, ` ${value}`]) {
      expect(() => loadApiConfig({ ...base, [variable]: padded })).toThrow(`Invalid configuration: ${variable}: must not begin or end with whitespace`);
    }
  });

  it('reads RESEND_RATE_LIMIT as resends per minute with an optional burst', () => {
    expect(loadApiConfig(base).RESEND_RATE_LIMIT).toEqual({ perMinute: 60, burst: 20 });
    expect(loadApiConfig({ ...base, RESEND_RATE_LIMIT: '600' }).RESEND_RATE_LIMIT).toEqual({ perMinute: 600, burst: 200 });
    expect(loadApiConfig({ ...base, RESEND_RATE_LIMIT: '10, 5' }).RESEND_RATE_LIMIT).toEqual({ perMinute: 10, burst: 5 });
  });

  it('reads LOG_RATE_LIMIT as log reads per merchant per minute with an optional burst', () => {
    expect(loadApiConfig(base).LOG_RATE_LIMIT).toEqual({ perMinute: 300, burst: 60 });
    expect(loadApiConfig({ ...base, LOG_RATE_LIMIT: '90' }).LOG_RATE_LIMIT).toEqual({ perMinute: 90, burst: 30 });
    expect(loadApiConfig({ ...base, LOG_RATE_LIMIT: '1000,200' }).LOG_RATE_LIMIT).toEqual({ perMinute: 1000, burst: 200 });
  });

  it('needs DATABASE_URL outside development mode, even with DELIVERY_LOG=off: the failure index and resends live in PostgreSQL', () => {
    const { DATABASE_URL: _unset, ...withoutDatabase } = base;
    expect(() => loadApiConfig(withoutDatabase)).toThrow('DATABASE_URL: is required: merchants live in PostgreSQL');
    expect(loadApiConfig({ ...withoutDatabase, WEBHOOKS_DEV: 'true' }).DATABASE_URL).toBeUndefined();
  });

  it.each([
    ['RESEND_RATE_LIMIT', '60/min', 'Invalid configuration: RESEND_RATE_LIMIT: "60/min" must be resends per minute'],
    ['RESEND_RATE_LIMIT', '0', 'Invalid configuration: RESEND_RATE_LIMIT: "0" must be resends per minute'],
    ['LOG_RATE_LIMIT', '300/min', 'Invalid configuration: LOG_RATE_LIMIT: "300/min" must be log reads per minute'],
    ['LOG_RATE_LIMIT', '300,0', 'Invalid configuration: LOG_RATE_LIMIT: "300,0" must be log reads per minute'],
    ['METRICS_PORT', '8080', 'Invalid configuration: METRICS_PORT: must differ from PORT'],
    ['ADMIN_PORT', '8080', 'Invalid configuration: ADMIN_PORT: must differ from PORT and METRICS_PORT'],
    ['TRUST_PROXY', 'true', 'Invalid configuration: TRUST_PROXY: must not be true'],
    ['TRUST_PROXY', '10.0.0.0/33', 'Invalid configuration: TRUST_PROXY: "10.0.0.0/33" must be a hop count'],
    ['TRUST_PROXY', 'loopback,proxy.internal', 'Invalid configuration: TRUST_PROXY: "proxy.internal" must be a hop count'],
  ])('refuses %s=%j with a message naming the variable', (variable, value, message) => {
    expect(() => loadApiConfig({ ...base, [variable]: value })).toThrow(message);
  });
});

describe('recorder configuration', () => {
  it.each([{}, { WEBHOOKS_DEV: 'true' }])('needs DATABASE_URL (%j), and does not suggest development mode for it, which does not help', (env) => {
    expect(() => loadRecorderConfig(env)).toThrow('DATABASE_URL: is required to run the recorder on its own');
  });
});

describe('.env.example', () => {
  /** KEY=VALUE lines as a shell or docker --env-file reads them; comments and blank lines skipped. */
  const example = Object.fromEntries(
    readFileSync('.env.example', 'utf8')
      .split('\n')
      .filter((line) => /^[A-Z_]+=/.test(line))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
  // What a deployment must add to the example before either program starts outside development mode.
  const env = { ...example, SECRETS_KEY: Buffer.alloc(32, 7).toString('base64'), AUTH_JWT_SECRET: 'x'.repeat(40), DATABASE_URL: 'postgres://db.internal/webhooks', PORTAL_PUBLIC_URL: 'https://webhooks.example.com' };

  it('serves the API and the dispatcher on one host without both binding one port', () => {
    const api = loadApiConfig(env);
    const dispatcher = loadDispatcherConfig(env);
    const apiPorts = [api.PORT, api.METRICS_PORT].filter((port) => port !== undefined);
    expect(apiPorts).not.toContain(dispatcher.METRICS_PORT);
  });

  it('says development mode is switched on by WEBHOOKS_DEV alone, as the programs do: NODE_ENV=development only warns', () => {
    const text = readFileSync('.env.example', 'utf8');
    expect(withDevDefaults({ NODE_ENV: 'development' }).dev).toBe(false);
    expect(text).not.toMatch(/also NODE_ENV=development|NODE_ENV=development switches development mode on/);
    expect(text).toContain('NODE_ENV=development does not switch development mode on');
  });

  it('gives the defaults the README gives: the dispatcher\'s metrics on 9464, the API\'s on PORT 8080', () => {
    expect(loadDispatcherConfig(env).METRICS_PORT).toBe(9464);
    expect(loadApiConfig(env).METRICS_PORT).toBeUndefined();
    expect(loadApiConfig(env).PORT).toBe(8080);
  });
});
