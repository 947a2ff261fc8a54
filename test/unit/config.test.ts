import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { loadApiConfig } from '../../apps/api/config.js';
import { ConfigError, formatDuration, parseDuration } from '../../libs/config/index.js';

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

  it('formats whole units back', () => {
    expect([300_000, 7_200_000, 1_500].map(formatDuration)).toEqual(['5m', '2h', '1500ms']);
  });
});

describe('dispatcher configuration', () => {
  const file = { MERCHANTS_FILE: 'merchants.json' };

  it('starts from the documented defaults', () => {
    const config = loadDispatcherConfig(file);
    expect(config).toMatchObject({
      RABBITMQ_URL: ['amqp://guest:guest@127.0.0.1:5672'],
      TOPOLOGY_PREFIX: 'webhooks',
      QUORUM_GROUP_SIZE: 3,
      STREAM_CLUSTER_SIZE: 3,
      RETRY_SCHEDULE: [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
      DELIVERY_TIMEOUT_MS: 10_000,
      FAILED_RETENTION: '30D',
      ALLOW_PRIVATE_TARGETS: false,
      HTTP_CLIENT: 'undici',
      LOG_LEVEL: 'info',
    });
  });

  it('reads RABBITMQ_URL as the list of a cluster\'s nodes', () => {
    expect(loadDispatcherConfig({ ...file, RABBITMQ_URL: 'amqp://u:p@n1:5672, amqp://u:p@n2:5672,amqps://u:p@n3' }).RABBITMQ_URL).toEqual([
      'amqp://u:p@n1:5672',
      'amqp://u:p@n2:5672',
      'amqps://u:p@n3',
    ]);
  });

  it('needs no MERCHANTS_FILE with MERCHANT_DIRECTORY=broker, and names the variable for any other value', () => {
    expect(loadDispatcherConfig({ MERCHANT_DIRECTORY: 'broker' }).MERCHANT_DIRECTORY).toBe('broker');
    expect(loadDispatcherConfig(file).MERCHANT_DIRECTORY).toBe('file');
    expect(() => loadDispatcherConfig({})).toThrow('MERCHANTS_FILE');
    expect(() => loadDispatcherConfig({ ...file, MERCHANT_DIRECTORY: 'redis' })).toThrow('MERCHANT_DIRECTORY: must be file or broker');
  });

  it('reads RETRY_OVERDUE_AFTER as a duration, naming the variable when it is not one', () => {
    expect(loadDispatcherConfig(file).RETRY_OVERDUE_AFTER).toBe(120_000);
    expect(loadDispatcherConfig({ ...file, RETRY_OVERDUE_AFTER: '30s' }).RETRY_OVERDUE_AFTER).toBe(30_000);
    expect(() => loadDispatcherConfig({ ...file, RETRY_OVERDUE_AFTER: 'soon' })).toThrow('RETRY_OVERDUE_AFTER');
  });

  it('reads RETRY_SCHEDULE with spaces and mixed units', () => {
    expect(loadDispatcherConfig({ ...file, RETRY_SCHEDULE: '200ms, 5s,5m ,2h' }).RETRY_SCHEDULE).toEqual([200, 5_000, 300_000, 7_200_000]);
  });

  it('takes an empty RETRY_SCHEDULE as a single attempt', () => {
    expect(loadDispatcherConfig({ ...file, RETRY_SCHEDULE: '' }).RETRY_SCHEDULE).toEqual([]);
  });

  it.each([
    ['RETRY_SCHEDULE', '5s,soon', 'Invalid configuration: RETRY_SCHEDULE: "soon" is not a duration'],
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
  const base = { MERCHANTS_FILE: 'merchants.json', AUTH_JWT_SECRET: 'x'.repeat(40) };

  it('reads RESEND_RATE_LIMIT as resends per minute with an optional burst', () => {
    expect(loadApiConfig(base).RESEND_RATE_LIMIT).toEqual({ perMinute: 60, burst: 20 });
    expect(loadApiConfig({ ...base, RESEND_RATE_LIMIT: '600' }).RESEND_RATE_LIMIT).toEqual({ perMinute: 600, burst: 200 });
    expect(loadApiConfig({ ...base, RESEND_RATE_LIMIT: '10, 5' }).RESEND_RATE_LIMIT).toEqual({ perMinute: 10, burst: 5 });
  });

  it.each([
    ['RESEND_RATE_LIMIT', '60/min', 'Invalid configuration: RESEND_RATE_LIMIT: "60/min" must be resends per minute'],
    ['RESEND_RATE_LIMIT', '0', 'Invalid configuration: RESEND_RATE_LIMIT: "0" must be resends per minute'],
    ['METRICS_PORT', '8080', 'Invalid configuration: METRICS_PORT: must differ from PORT'],
  ])('refuses %s=%j with a message naming the variable', (variable, value, message) => {
    expect(() => loadApiConfig({ ...base, [variable]: value })).toThrow(message);
  });
});
