/**
 * No Docker engine runs where the tests run, so these check what can be checked without one: the
 * compose file, the files it mounts, the broker definitions against the topology the programs
 * declare, the demo merchant's secret on both sides, and the dashboard's metric names.
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join, posix, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Webhook } from 'standardwebhooks';
import { parse } from 'yaml';
import { loadApiConfig } from '../../apps/api/config.js';
import { loadDemoReceiverConfig } from '../../apps/demo-receiver/config.js';
import { createDemoReceiver } from '../../apps/demo-receiver/server.js';
import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { loadRecorderConfig } from '../../apps/recorder/config.js';
import { ConfigError, tracingSettingsOf } from '../../libs/config/index.js';
import { DEFAULT_STOP_TIMEOUT_MS } from '../../libs/runtime/run.js';
import { silentLogger } from '../../libs/logger/index.js';
import { cliEnvSchema } from '../../apps/cli/config.js';
import { parseEnv } from '../../libs/config/index.js';
import { METRIC_NAMES } from '../../libs/metrics/names.js';
import { topologySpec, type TopologySpec } from '../../libs/topology/index.js';
import { metricNamesIn } from '../support/promql.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const DOCKER = join(REPO, 'docker');
const read = (path: string) => readFileSync(join(REPO, path), 'utf8');

interface Service {
  image?: string;
  build?: { context: string; dockerfile: string };
  command?: string[];
  environment?: Record<string, string> | string[];
  ports?: string[];
  volumes?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }> | string[];
  profiles?: string[];
  restart?: string;
  stop_grace_period?: string;
}

// Compose resolves YAML merge keys (<<), which YAML 1.2 leaves off unless asked.
const compose = parse(read('docker/compose.yaml'), { merge: true }) as { services: Record<string, Service>; version?: unknown };
const services = compose.services;
const PROGRAMS = { api: 'api', dispatcher: 'dispatcher', recorder: 'recorder', 'demo-merchant': 'demo-receiver' } as const;

function service(name: string): Service {
  const found = services[name];
  if (!found) throw new Error(`compose.yaml has no service ${name}`);
  return found;
}

/** A service's environment as compose gives it, `${NAME:-default}` resolved from `shell` (empty by default: nothing exported). */
function envOf(name: string, shell: Record<string, string> = {}): Record<string, string> {
  const env = service(name).environment ?? {};
  const entries = Array.isArray(env) ? env.map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]) : Object.entries(env);
  const interpolate = (value: string) => value.replace(/\$\{([A-Z0-9_]+)(?::-([^}]*))?\}/g, (_m, key: string, fallback?: string) => shell[key] || (fallback ?? ''));
  return Object.fromEntries(entries.map(([k, v]) => [k, interpolate(String(v))]));
}

/** Container ports of `[host_ip:]host:container[/proto]` entries. */
function containerPorts(name: string): number[] {
  return (service(name).ports ?? []).map((p) => Number(String(p).split('/')[0]!.split(':').at(-1)));
}

/** Short-syntax bind mounts (a path, not a named volume), with the source resolved against docker/ as compose does. */
function mounts(name: string): Array<{ source: string; target: string; mode?: string }> {
  return (service(name).volumes ?? []).filter((v) => /^[./]/.test(v)).map((v) => {
    const [source, target, mode] = v.split(':');
    return { source: resolve(DOCKER, source!), target: target!, mode };
  });
}

function mountTarget(name: string, repoPath: string): string | undefined {
  return mounts(name).find((m) => m.source === join(REPO, repoPath))?.target;
}

/** What `rabbitmqctl export_definitions` writes for a topology on the default vhost. */
function definitionsOf(spec: TopologySpec) {
  const byName = (a: { name: string }, b: { name: string }) => a.name.localeCompare(b.name);
  return {
    exchanges: [spec.exchange, spec.operational].map((exchange) => ({ name: exchange.name, vhost: '/', type: exchange.type, durable: true, auto_delete: false, internal: false, arguments: {} })),
    queues: spec.queues.map((q) => ({ name: q.name, vhost: '/', durable: true, auto_delete: false, arguments: q.arguments })).sort(byName),
    bindings: [
      { source: spec.binding.source, vhost: '/', destination: spec.binding.destination, destination_type: 'queue', routing_key: spec.binding.routingKey, arguments: {} },
    ],
  };
}

interface Definitions {
  users: Array<{ name: string; password_hash: string; hashing_algorithm: string; tags: string[] }>;
  vhosts: Array<{ name: string }>;
  permissions: Array<{ user: string; vhost: string; configure: string; write: string; read: string }>;
  exchanges: unknown[];
  queues: Array<{ name: string }>;
  bindings: unknown[];
}
const definitions = JSON.parse(read('docker/rabbitmq/definitions.json')) as Definitions;

describe('docker/compose.yaml', () => {
  it('runs the broker, PostgreSQL and the four programs by default, and Prometheus and Grafana only with the monitoring profile', () => {
    expect(compose.version).toBeUndefined();
    const byDefault = Object.keys(services).filter((name) => !services[name]!.profiles);
    const monitoring = Object.keys(services).filter((name) => services[name]!.profiles?.includes('monitoring'));
    expect(byDefault.sort()).toEqual(['api', 'demo-merchant', 'dispatcher', 'merchants', 'migrate', 'postgres', 'rabbitmq', 'recorder']);
    expect(service('postgres').image).toMatch(/^postgres:15(\b|$)/);
    expect(monitoring.sort()).toEqual(['grafana', 'prometheus']);
    expect(service('prometheus').image).toMatch(/^prom\/prometheus(:|$)/);
    expect(service('grafana').image).toMatch(/^grafana\/grafana(:|$)/);
  });

  it('runs RabbitMQ 4 with the management console on 5672 and 15672, healthy once it answers a ping', () => {
    const rabbitmq = service('rabbitmq');
    expect(rabbitmq.image).toBe('rabbitmq:4-management');
    expect(containerPorts('rabbitmq')).toEqual(expect.arrayContaining([5672, 15672]));
    expect(rabbitmq.healthcheck?.test).toEqual(['CMD', 'rabbitmq-diagnostics', '-q', 'ping']);
  });

  it.each(Object.entries(PROGRAMS))('builds %s from docker/Dockerfile at the repository root and runs its built entry point', (name, app) => {
    const program = service(name);
    expect(program.build).toEqual({ context: '..', dockerfile: 'docker/Dockerfile' });
    expect(resolve(DOCKER, program.build!.context)).toBe(resolve(REPO));
    // The demo merchant's through a shell, which hands it its secret: exec'd, so that it gets the signals.
    expect(name === 'demo-merchant' ? program.command?.slice(0, 2).concat(/exec (node \S+)$/.exec(program.command[2] ?? '')?.[1]?.split(' ') ?? []) : program.command).toEqual(
      name === 'demo-merchant' ? ['sh', '-c', 'node', `dist/apps/${app}/main.js`] : ['node', `dist/apps/${app}/main.js`],
    );
    expect(existsSync(join(REPO, 'apps', app, 'main.ts'))).toBe(true);
  });

  it('starts the programs only once RabbitMQ is healthy, and those that read the delivery log once PostgreSQL is', () => {
    for (const name of ['api', 'dispatcher', 'recorder']) {
      expect(service(name).depends_on).toMatchObject({ rabbitmq: { condition: 'service_healthy' } });
    }
    for (const name of ['api', 'recorder']) {
      expect(service(name).depends_on).toMatchObject({ postgres: { condition: 'service_healthy' } });
    }
    expect(service('postgres').healthcheck?.test.slice(0, 2)).toEqual(['CMD', 'pg_isready']);
  });

  it('runs webhooks migrate once PostgreSQL is healthy, on the programs\' database, and starts the programs only once it succeeded', () => {
    const migrate = service('migrate');
    expect(migrate.build).toEqual({ context: '..', dockerfile: 'docker/Dockerfile' });
    expect(migrate.command).toEqual(['node', 'dist/apps/cli/main.js', 'migrate']);
    expect(migrate.depends_on).toMatchObject({ postgres: { condition: 'service_healthy' } });
    expect(migrate.restart).toBe('no');
    for (const name of ['api', 'dispatcher', 'recorder']) {
      expect(envOf('migrate').DATABASE_URL).toBe(envOf(name).DATABASE_URL);
      expect(service(name).depends_on).toMatchObject({ migrate: { condition: 'service_completed_successfully' } });
    }
  });

  it('checks each program\'s health at /healthz on the port it serves', () => {
    const ports = {
      api: envOf('api').PORT ?? '8080',
      dispatcher: envOf('dispatcher').METRICS_PORT,
      recorder: envOf('recorder').METRICS_PORT,
      'demo-merchant': envOf('demo-merchant').DEMO_RECEIVER_PORT,
    };
    expect(ports.dispatcher).toBe('9464');
    for (const [name, port] of Object.entries(ports)) {
      const test = service(name).healthcheck?.test ?? [];
      expect(test.slice(0, 3)).toEqual(['CMD', 'node', '-e']);
      expect(test[3]).toContain(`fetch('http://127.0.0.1:${port}/healthz')`);
      expect(containerPorts(name)).toContain(Number(port));
    }
  });

  it('connects the programs to the broker as the user the definitions create, with the password that hashes to its password_hash', () => {
    for (const name of ['api', 'dispatcher', 'recorder']) {
      const url = new URL(envOf(name).RABBITMQ_URL!);
      expect(url.hostname).toBe('rabbitmq');
      expect(url.pathname).toBe(''); // the default vhost, "/"
      const user = definitions.users.find((u) => u.name === decodeURIComponent(url.username));
      expect(user?.hashing_algorithm).toBe('rabbit_password_hashing_sha256');
      // RabbitMQ's hash: base64(salt(4 bytes) + sha256(salt + password)).
      const stored = Buffer.from(user!.password_hash, 'base64');
      const salt = stored.subarray(0, 4);
      const digest = createHash('sha256').update(Buffer.concat([salt, Buffer.from(decodeURIComponent(url.password))])).digest();
      expect(stored.subarray(4).equals(digest)).toBe(true);
    }
  });

  it('gives the API and the dispatcher a configuration their own parsers accept, with private targets allowed for the demo merchant', () => {
    const api = loadApiConfig(envOf('api'));
    const dispatcher = loadDispatcherConfig(envOf('dispatcher'));
    expect(api.AUTH_JWT_SECRET!.length).toBeGreaterThanOrEqual(32);
    expect(api.AUTH_JWT_SECRET).toMatch(/demo/);
    expect(dispatcher.ALLOW_PRIVATE_TARGETS).toBe(true);
    // Outside development mode the portal's links need PORTAL_PUBLIC_URL: the demo's is the port
    // published on this machine, http on a loopback host (a browser's secure context).
    expect(api.WEBHOOKS_DEV).toBe(false);
    const portal = new URL(api.PORTAL_PUBLIC_URL!);
    const published = (service('api').ports ?? []).map((p) => String(p).split(':')).find((parts) => parts.at(-1) === String(api.PORT));
    expect({ host: portal.hostname, port: portal.port, path: portal.pathname }).toEqual({ host: 'localhost', port: published?.at(-2), path: '/' });
    expect(loadApiConfig(envOf('api', { PORTAL_PUBLIC_URL: 'https://webhooks.example.com' })).PORTAL_PUBLIC_URL).toBe('https://webhooks.example.com');
    // Merchants in PostgreSQL, their secrets sealed with the demo's key.
    for (const config of [api, dispatcher]) expect(config.SECRETS_KEY?.toString()).toMatch(/demo/);
  });

  it('turns the delivery log on, with the database of the postgres service, and a recorder its parser accepts', () => {
    const recorder = loadRecorderConfig(envOf('recorder'));
    const postgres = envOf('postgres');
    for (const config of [loadApiConfig(envOf('api')), loadDispatcherConfig(envOf('dispatcher')), recorder]) {
      expect(config.DELIVERY_LOG).toBe('on');
    }
    for (const name of ['api', 'recorder']) {
      const url = new URL(envOf(name).DATABASE_URL!);
      expect({ host: url.host, user: url.username, password: url.password, db: url.pathname }).toEqual({
        host: 'postgres:5432',
        user: postgres.POSTGRES_USER,
        password: postgres.POSTGRES_PASSWORD,
        db: `/${postgres.POSTGRES_DB}`,
      });
    }
    expect(recorder.METRICS_PORT).toBe(9465);
  });

  it('runs Jaeger only with the tracing profile, and the programs export to it when OTEL_EXPORTER_OTLP_ENDPOINT names it, and trace nothing otherwise', () => {
    const tracing = Object.keys(services).filter((name) => services[name]!.profiles?.includes('tracing'));
    expect(tracing).toEqual(['jaeger']);
    expect(service('jaeger').image).toMatch(/^jaegertracing\/all-in-one:/);
    expect(containerPorts('jaeger')).toEqual(expect.arrayContaining([16686, 4318]));
    const configs = (shell: Record<string, string>) => [loadApiConfig(envOf('api', shell)), loadDispatcherConfig(envOf('dispatcher', shell)), loadRecorderConfig(envOf('recorder', shell))];
    for (const config of configs({})) expect(tracingSettingsOf(config, 'x')).toBeUndefined();
    for (const config of configs({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318' })) {
      expect(tracingSettingsOf(config, 'x')).toMatchObject({ url: 'http://jaeger:4318/v1/traces', protocol: 'http/protobuf' });
    }
  });

  it('gives each program longer than its stop may take before Docker kills it (its default is 10 s)', () => {
    // A stop past its bound exits by itself a second later (libs/runtime/run.ts); Docker's SIGKILL
    // before that cut a dispatcher's drain short, and what it was sending was sent again.
    const stopMs = {
      api: loadApiConfig(envOf('api')).SHUTDOWN_TIMEOUT,
      dispatcher: loadDispatcherConfig(envOf('dispatcher')).SHUTDOWN_TIMEOUT,
      recorder: DEFAULT_STOP_TIMEOUT_MS,
    };
    for (const [name, ms] of Object.entries(stopMs)) {
      const grace = /^(\d+)s$/.exec(service(name).stop_grace_period ?? '10s')?.[1];
      expect({ name, enough: Number(grace) * 1000 > ms + 1_000 }).toEqual({ name, enough: true });
    }
  });

  it('mounts only files that exist in the repository, read-only', () => {
    const all = Object.keys(services).flatMap((name) => mounts(name).map((m) => ({ name, ...m })));
    expect(all.length).toBeGreaterThanOrEqual(7);
    for (const mount of all) {
      expect({ ...mount, exists: existsSync(mount.source) }).toMatchObject({ exists: true, mode: 'ro' });
      expect(mount.source.startsWith(DOCKER)).toBe(true);
    }
  });

  it('mounts the definitions where rabbitmq.conf tells the broker to load them from at boot', () => {
    const conf = read('docker/rabbitmq/rabbitmq.conf');
    const setting = (key: string) => new RegExp(`^${key.replace(/\./g, '\\.')}\\s*=\\s*(\\S+)\\s*$`, 'm').exec(conf)?.[1];
    expect(setting('definitions.import_backend')).toBe('local_filesystem');
    expect(setting('definitions.local.path')).toBe(mountTarget('rabbitmq', 'docker/rabbitmq/definitions.json'));
    expect(mountTarget('rabbitmq', 'docker/rabbitmq/rabbitmq.conf')).toBe('/etc/rabbitmq/rabbitmq.conf');
  });
});

describe('docker/rabbitmq/definitions.json', () => {
  it('holds exactly the exchange, queues with their arguments, and binding that topologySpec gives for the compose configuration', () => {
    const config = loadDispatcherConfig(envOf('dispatcher'));
    // Compose keeps the defaults; if it ever sets TOPOLOGY_PREFIX or FAILED_RETENTION the file must follow.
    expect(config).toMatchObject({ TOPOLOGY_PREFIX: 'webhooks', FAILED_RETENTION: '30D' });
    expect(config.RETRY_SCHEDULE).toHaveLength(7);
    const expected = definitionsOf(
      topologySpec({
        prefix: config.TOPOLOGY_PREFIX,
        failedRetention: config.FAILED_RETENTION,
        deliveriesStream: config.DELIVERY_LOG === 'on',
      }),
    );
    expect({
      exchanges: definitions.exchanges,
      queues: [...definitions.queues].sort((a, b) => a.name.localeCompare(b.name)),
      bindings: definitions.bindings,
    }).toEqual(expected);
  });

  it('lets its one user do everything on the default vhost, and nobody else log in', () => {
    expect(definitions.vhosts).toEqual([{ name: '/' }]);
    expect(definitions.users.map((u) => u.name)).toEqual(['webhooks']);
    expect(definitions.permissions).toEqual([{ user: 'webhooks', vhost: '/', configure: '.*', write: '.*', read: '.*' }]);
  });
});

describe('docker/Dockerfile', () => {
  const dockerfile = read('docker/Dockerfile');
  const stages = dockerfile.split(/^FROM\s/m).slice(1);
  const final = stages.at(-1) ?? '';

  it('builds in one stage and runs the compiled output in another', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(final).toMatch(/^COPY --from=\S+ \/app\/dist \.\/dist$/m);
  });

  it('puts the SQL migrations where the built runner reads them (tsc does not copy them to dist/)', async () => {
    expect(final).toMatch(/^COPY libs\/migrations\/sql \.\/libs\/migrations\/sql$/m);
    // The built runner (the image's /app/dist) reads the package's libs/migrations/sql (/app/libs/...).
    const built = (await import(join(REPO, 'dist/libs/migrations/files.js'))) as { SQL_DIR: string; MIGRATIONS: unknown[] };
    expect(built.SQL_DIR).toBe(join(REPO, 'libs/migrations/sql/'));
    expect(built.MIGRATIONS.length).toBeGreaterThan(0);
  });

  it('installs only production dependencies in the final stage', () => {
    expect(final).toMatch(/^RUN npm ci --omit=dev\b/m);
    expect(final).not.toMatch(/^RUN npm (ci|install)(?!.*--omit=dev)/m);
  });

  it('runs as a non-root user and declares a health check', () => {
    const user = /^USER\s+(\S+)/m.exec(final)?.[1];
    expect(user).toBeDefined();
    expect(['root', '0', '0:0']).not.toContain(user);
    expect(final).toMatch(/^HEALTHCHECK\s.*CMD\s/ms);
  });
});

describe('the demo merchant in compose', () => {
  const receiverEnv = envOf('demo-merchant');
  const merchants = service('merchants');
  const script = merchants.command?.[2] ?? '';
  const secret = 'whsec_Y29tcG9zZS1kZW1vLW9ubHktc2VjcmV0LW5vdC1mb3ItcHJvZHVjdGlvbg==';

  it('is m_demo, written by `webhooks merchants` once the schema is there, its endpoint at the demo-merchant service', () => {
    expect(merchants.command?.slice(0, 2)).toEqual(['sh', '-c']);
    expect(script).toContain('node dist/apps/cli/main.js merchants set m_demo --public-key pk_test_demo_0123456789');
    expect(script).toContain(`node dist/apps/cli/main.js merchants endpoints add m_demo --url http://demo-merchant:${receiverEnv.DEMO_RECEIVER_PORT}/webhooks`);
    // Again after a restart on the same database: the endpoint is added once.
    expect(script).toContain(`merchants endpoints list m_demo --json | grep -q demo-merchant:${receiverEnv.DEMO_RECEIVER_PORT};`);
    expect(merchants.depends_on).toMatchObject({ migrate: { condition: 'service_completed_successfully' }, rabbitmq: { condition: 'service_healthy' } });
    expect(merchants.restart).toBe('no');
    // The CLI's own parser takes its environment: the programs' database and key, and development
    // mode for this command alone (the demo's endpoint is http, which only development mode writes).
    const cli = parseEnv(cliEnvSchema, envOf('merchants'));
    expect(cli).toMatchObject({ DATABASE_URL: envOf('api').DATABASE_URL, WEBHOOKS_DEV: true, ALLOW_PRIVATE_TARGETS: true });
    expect(cli.SECRETS_KEY).toEqual(loadApiConfig(envOf('api')).SECRETS_KEY);
    expect(envOf('api').WEBHOOKS_DEV).toBeUndefined();
  });

  it('hands the endpoint secret the CLI prints to demo-merchant, which verifies with it, through a volume of their own', () => {
    expect(script).toMatch(/sed -n 's\/\^webhook secret: \/\/p' > \/tmp\/demo-webhook-secret; fi$/);
    expect(merchants.volumes).toEqual(['demo-secret:/tmp']);
    expect(service('demo-merchant').volumes).toEqual(['demo-secret:/tmp:ro']);
    // `$$`: compose's escape of a `$` it is not to interpolate.
    expect(service('demo-merchant').command?.[2]).toBe('DEMO_WEBHOOK_SECRET="$$(cat /tmp/demo-webhook-secret)" exec node dist/apps/demo-receiver/main.js');
    expect(service('demo-merchant').depends_on).toMatchObject({ merchants: { condition: 'service_completed_successfully' } });
    expect(Object.keys((compose as { volumes?: Record<string, unknown> }).volumes ?? {})).toEqual(['demo-secret']);
  });

  it('gets an environment the receiver accepts, listening on all interfaces of its container', () => {
    expect(loadDemoReceiverConfig({ ...receiverEnv, DEMO_WEBHOOK_SECRET: secret })).toMatchObject({ DEMO_RECEIVER_HOST: '0.0.0.0', DEMO_RECEIVER_PORT: 4400 });
  });

  it.each([
    [{}, 'Invalid configuration: DEMO_WEBHOOK_SECRET: is required'],
    [{ DEMO_WEBHOOK_SECRET: 'not-a-secret' }, 'Invalid configuration: DEMO_WEBHOOK_SECRET: must be whsec_ followed by base64'],
  ])('refuses to start with %j, naming DEMO_WEBHOOK_SECRET', (env, message) => {
    const error = (() => {
      try {
        loadDemoReceiverConfig(env);
      } catch (err) {
        return err;
      }
    })();
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).message).toBe(message);
  });

  it('answers its health check and accepts a webhook signed with its secret', async () => {
    const receiver = createDemoReceiver({ secret, logger: silentLogger() });
    receiver.listen(0, '127.0.0.1');
    await once(receiver, 'listening');
    const base = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
    try {
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      const body = JSON.stringify({ event: 'payout', data: { reference: 'PO-1' } });
      const timestamp = new Date();
      const signature = new Webhook(secret).sign('msg_1', timestamp, body);
      const headers = { 'content-type': 'application/json', 'webhook-id': 'msg_1', 'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)), 'webhook-signature': signature };
      expect((await fetch(`${base}/webhooks`, { method: 'POST', headers, body })).status).toBe(204);
    } finally {
      receiver.closeAllConnections();
      await new Promise<void>((done) => receiver.close(() => done()));
    }
  });
});

describe('monitoring', () => {
  const prometheus = parse(read('docker/prometheus.yml')) as {
    scrape_configs: Array<{ job_name: string; metrics_path?: string; static_configs: Array<{ targets: string[] }> }>;
  };
  const datasources = parse(read('docker/grafana/provisioning/datasources/prometheus.yaml')) as {
    datasources: Array<{ uid: string; type: string; url: string }>;
  };
  const providers = parse(read('docker/grafana/provisioning/dashboards/webhooks.yaml')) as {
    providers: Array<{ type: string; options: { path: string } }>;
  };
  const dashboard = JSON.parse(read('docker/grafana/dashboard.json')) as {
    schemaVersion: number;
    panels: Array<{ id: number; title: string; datasource?: { uid: string }; targets: Array<{ expr: string; datasource?: { uid: string } }> }>;
  };
  const expressions = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr));
  const histograms = new Set<string>([METRIC_NAMES.deliveryDuration]);
  const exported = new Set(
    Object.values(METRIC_NAMES).flatMap((name) => (histograms.has(name) ? ['_bucket', '_sum', '_count'].map((s) => name + s) : [name])),
  );

  it('has Prometheus scrape /metrics of the API, the dispatcher and the recorder on the ports they serve', () => {
    const targets = prometheus.scrape_configs.flatMap((job) =>
      job.static_configs.flatMap((c) => c.targets.map((t) => `${job.metrics_path ?? '/metrics'} ${t}`)),
    );
    expect(targets).toEqual(
      expect.arrayContaining([
        `/metrics api:${envOf('api').PORT ?? '8080'}`,
        `/metrics dispatcher:${envOf('dispatcher').METRICS_PORT}`,
        `/metrics recorder:${envOf('recorder').METRICS_PORT}`,
      ]),
    );
    expect(mountTarget('prometheus', 'docker/prometheus.yml')).toBe('/etc/prometheus/prometheus.yml');
  });

  it('provisions the Prometheus data source that every dashboard panel names by uid', () => {
    const [source] = datasources.datasources;
    expect(source).toMatchObject({ type: 'prometheus', url: 'http://prometheus:9090' });
    expect(containerPorts('prometheus')).toContain(9090);
    const uids = dashboard.panels.flatMap((p) => [p.datasource?.uid, ...p.targets.map((t) => t.datasource?.uid)]);
    expect(new Set(uids)).toEqual(new Set([source!.uid]));
  });

  it('loads the dashboard from the folder compose mounts it into', () => {
    const target = mountTarget('grafana', 'docker/grafana/dashboard.json');
    expect(target).toMatch(/\.json$/);
    expect(providers.providers).toEqual([expect.objectContaining({ type: 'file', options: { path: posix.dirname(target!) } })]);
    for (const dir of ['datasources', 'dashboards']) {
      expect(mountTarget('grafana', `docker/grafana/provisioning/${dir}`)).toBe(`/etc/grafana/provisioning/${dir}`);
    }
  });

  it('finds every metric name in a PromQL expression, and only those', () => {
    expect(metricNamesIn('histogram_quantile(0.99, sum by (le) (rate(a_bucket{queue="b_c"}[$__rate_interval]))) / on (x) ignoring (y) b_total or vector(0)')).toEqual([
      'a_bucket',
      'b_total',
    ]);
  });

  it('uses only metric names the programs export', () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(39);
    const used = expressions.flatMap(metricNamesIn);
    expect(used.filter((name) => !exported.has(name))).toEqual([]);
  });

  it('charts every metric the programs export, in panels with distinct ids', () => {
    const used = new Set(expressions.flatMap(metricNamesIn).map((name) => name.replace(/_(bucket|sum|count)$/, '')));
    expect(Object.values(METRIC_NAMES).filter((name) => !used.has(name))).toEqual([]);
    expect(new Set(dashboard.panels.map((p) => p.id)).size).toBe(dashboard.panels.length);
  });
});
