import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { tracingSettingsOf } from '../../libs/config/index.js';

const base = { MERCHANTS_FILE: 'merchants.json' };
const settings = (env: Record<string, string>) => tracingSettingsOf(loadDispatcherConfig({ ...base, ...env }), 'webhooks-dispatcher');

describe('the OTEL variables', () => {
  it('leave tracing off without an endpoint, whatever else is set', () => {
    expect(settings({})).toBeUndefined();
    expect(settings({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on', OTEL_EXPORTER_OTLP_ENDPOINT: '' })).toBeUndefined();
  });

  it('turn it on with an endpoint: traces to <endpoint>/v1/traces over http/protobuf, parent-based, named after the program', () => {
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      url: 'http://collector:4318/v1/traces',
      protocol: 'http/protobuf',
      serviceName: 'webhooks-dispatcher',
      sampler: { name: 'parentbased_always_on', ratio: 1 },
      resourceAttributes: {},
    });
  });

  it('take the traces endpoint as the whole URL, the traces protocol over the general one, and the resource attributes', () => {
    expect(
      settings({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://ignored:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://otel.example/custom/traces',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod,team=pay%20ments,service.name=from-resource',
      }),
    ).toEqual({
      url: 'https://otel.example/custom/traces',
      protocol: 'http/json',
      serviceName: 'from-resource',
      sampler: { name: 'parentbased_traceidratio', ratio: 0.25 },
      resourceAttributes: { 'deployment.environment': 'prod', team: 'pay ments' },
    });
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SERVICE_NAME: 'mine', OTEL_RESOURCE_ATTRIBUTES: 'service.name=other' })?.serviceName).toBe('mine');
  });

  it('stay off when the SDK is disabled or the exporter is none', () => {
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' })).toBeUndefined();
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined();
  });

  it.each([
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'collector:4318', 'must be an http:// or https:// URL'],
    ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'grpc://c:4317', 'must be an http:// or https:// URL'],
    ['OTEL_EXPORTER_OTLP_PROTOCOL', 'grpc', 'is not supported: use http/protobuf (the default) or http/json'],
    ['OTEL_TRACES_SAMPLER', 'sometimes', 'must be one of always_on'],
    ['OTEL_TRACES_SAMPLER_ARG', '2', 'must be a ratio from 0 to 1'],
    ['OTEL_RESOURCE_ATTRIBUTES', 'justakey', 'must be key=value pairs'],
    ['OTEL_TRACES_EXPORTER', 'zipkin', 'must be otlp or none'],
  ])('refuses %s=%j naming the variable', (variable, value, message) => {
    expect(() => loadDispatcherConfig({ ...base, [variable]: value })).toThrow(`Invalid configuration: ${variable}: `);
    expect(() => loadDispatcherConfig({ ...base, [variable]: value })).toThrow(message);
  });
});
