import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { tracingSettingsOf } from '../../libs/config/index.js';

// A dispatcher as deployed: merchants and waits in PostgreSQL.
const base = { DATABASE_URL: 'postgres://127.0.0.1/webhooks', SECRETS_KEY: Buffer.alloc(32, 7).toString('base64') };
const settings = (env: Record<string, string>) => tracingSettingsOf(loadDispatcherConfig({ ...base, ...env }), 'webhooks-dispatcher');

describe('the OTEL variables', () => {
  it('leave tracing off without an endpoint, whatever else is set', () => {
    expect(settings({})).toBeUndefined();
    expect(settings({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on', OTEL_EXPORTER_OTLP_ENDPOINT: '' })).toBeUndefined();
  });

  it('turn it on with an endpoint: traces to <endpoint>/v1/traces over http/protobuf, parent-based, named after the program, the batch processor bounded', () => {
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      url: 'http://collector:4318/v1/traces',
      protocol: 'http/protobuf',
      serviceName: 'webhooks-dispatcher',
      sampler: { name: 'parentbased_always_on', ratio: 1 },
      resourceAttributes: {},
      batch: { maxQueueSize: 16_384, maxExportBatchSize: 2_048, scheduledDelayMillis: 500, exportTimeoutMillis: 30_000 },
    });
  });

  it('take the traces endpoint as the whole URL, the traces protocol over the general one, the resource attributes and OTEL_BSP_*', () => {
    expect(
      settings({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://ignored:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://otel.example/custom/traces',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod,team=pay%20ments,service.name=from-resource',
        OTEL_BSP_MAX_QUEUE_SIZE: '4096',
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '512',
        OTEL_BSP_SCHEDULE_DELAY: '5000',
        OTEL_BSP_EXPORT_TIMEOUT: '10000',
      }),
    ).toEqual({
      url: 'https://otel.example/custom/traces',
      protocol: 'http/json',
      serviceName: 'from-resource',
      sampler: { name: 'parentbased_traceidratio', ratio: 0.25 },
      resourceAttributes: { 'deployment.environment': 'prod', team: 'pay ments' },
      batch: { maxQueueSize: 4_096, maxExportBatchSize: 512, scheduledDelayMillis: 5_000, exportTimeoutMillis: 10_000 },
    });
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SERVICE_NAME: 'mine', OTEL_RESOURCE_ATTRIBUTES: 'service.name=other' })?.serviceName).toBe('mine');
  });

  it('stay off when the SDK is disabled or the exporter is none', () => {
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' })).toBeUndefined();
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined();
    // Case-insensitive; empty is unset.
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'TRUE' })).toBeUndefined();
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'False' })).toBeDefined();
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: '' })).toBeDefined();
  });

  it.each([
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'collector:4318', 'must be an http:// or https:// URL'],
    ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'grpc://c:4317', 'must be an http:// or https:// URL'],
    ['OTEL_EXPORTER_OTLP_PROTOCOL', 'grpc', 'is not supported: use http/protobuf (the default) or http/json'],
    ['OTEL_TRACES_SAMPLER', 'sometimes', 'must be one of always_on'],
    ['OTEL_TRACES_SAMPLER_ARG', '2', 'must be a ratio from 0 to 1'],
    ['OTEL_RESOURCE_ATTRIBUTES', 'justakey', 'must be key=value pairs'],
    ['OTEL_TRACES_EXPORTER', 'zipkin', 'must be otlp or none'],
    // A typo was taken as false: tracing stayed on, silently.
    ['OTEL_SDK_DISABLED', 'ture', 'must be true or false'],
    ['OTEL_BSP_MAX_QUEUE_SIZE', '0', 'must be a whole number above 0'],
    ['OTEL_BSP_SCHEDULE_DELAY', '1s', 'must be a whole number above 0'],
    // A Node timer past 2^31-1 ms fires after 1 ms: a batch per span and a warning each, an export abandoned at once.
    ['OTEL_BSP_SCHEDULE_DELAY', '2147483648', 'must be at most 2147483647'],
    ['OTEL_BSP_EXPORT_TIMEOUT', '9999999999', 'must be at most 2147483647'],
  ])('refuses %s=%j naming the variable', (variable, value, message) => {
    expect(() => loadDispatcherConfig({ ...base, [variable]: value })).toThrow(`Invalid configuration: ${variable}: `);
    expect(() => loadDispatcherConfig({ ...base, [variable]: value })).toThrow(message);
  });
});
