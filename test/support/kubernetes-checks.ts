/**
 * The checks test/unit/kubernetes-manifests.test.ts makes on rendered manifests, each a function
 * from the objects to the problems it finds (none: []), so that the test can also plant a mistake
 * in a copy and see each one fail.
 */
import { BlockList, isIP } from 'node:net';
import { isDeepStrictEqual } from 'node:util';
import { parse } from 'yaml';
import type { z } from 'zod';
import { apiEnvSchema } from '../../apps/api/config.js';
import { cliEnvSchema } from '../../apps/cli/config.js';
import { dispatcherEnvSchema } from '../../apps/dispatcher/config.js';
import { recorderEnvSchema } from '../../apps/recorder/config.js';
import { BROKER_START_DEADLINE_MS } from '../../libs/broker/timing.js';
import { parseDuration } from '../../libs/config/durations.js';
import { BLOCKED_RANGES, RESERVED_V6 } from '../../libs/http/address-guard.js';
import { MERCHANTS_START_STALL_MS } from '../../libs/merchants/pg-directory.js';
import { SCHEMA_WAIT_MS } from '../../libs/migrations/gate.js';
import type { K8sObject } from './kubernetes.js';

/** Manifests are plain data, read field by field. */
type Any = any;

/** Variables that hold a secret or a password: only ever from a Secret. */
export const SECRET_VARIABLES = ['SECRETS_KEY', 'SECRETS_KEY_PREVIOUS', 'AUTH_JWT_SECRET', 'RABBITMQ_URL', 'DATABASE_URL', 'OPERATIONAL_WEBHOOK_SECRET', 'WEBHOOKS_ADMIN_TOKEN'];

type Program = 'api' | 'dispatcher' | 'recorder' | 'cli';
/** A container of a Deployment or a Job, and the program its command runs. */
export interface Container {
  where: string;
  kind: string;
  program: Program;
  pod: Any;
  container: Any;
}

const SCHEMAS: Record<Program, z.ZodType> = { api: apiEnvSchema, dispatcher: dispatcherEnvSchema, recorder: recorderEnvSchema, cli: cliEnvSchema };

/** Optional to a program's schema, set in production all the same (docs/production.md): a token minted for another service is refused. */
const RECOMMENDED: Partial<Record<Program, string[]>> = { api: ['AUTH_JWT_ISSUER', 'AUTH_JWT_AUDIENCE'] };

/**
 * How long each program may take to start before it gives up by itself (docs/operating.md): the
 * schema, then the merchant directory and RabbitMQ. The startup probe must allow more.
 */
const START_DEADLINE_MS: Record<Program, number> = {
  api: SCHEMA_WAIT_MS + MERCHANTS_START_STALL_MS + BROKER_START_DEADLINE_MS,
  dispatcher: SCHEMA_WAIT_MS + Math.max(MERCHANTS_START_STALL_MS, BROKER_START_DEADLINE_MS),
  recorder: SCHEMA_WAIT_MS + BROKER_START_DEADLINE_MS,
  cli: 0,
};
/**
 * libs/runtime/run.ts: a program's stop deadline when it reads no SHUTDOWN_TIMEOUT (the
 * recorder), and the second its backstop waits after any deadline before it exits anyway.
 */
const STOP = { defaultMs: 35_000, backstopMs: 1_000 };

/** Every container of every Deployment and Job, with the program its command runs. */
export function containers(objects: K8sObject[]): Container[] {
  const found: Container[] = [];
  for (const o of objects.filter((x) => x.kind === 'Deployment' || x.kind === 'Job')) {
    const pod = (o as Any).spec.template.spec;
    for (const container of pod.containers ?? []) {
      const program = /dist\/apps\/(\w+)\/main\.js/.exec((container.command ?? []).join(' '))?.[1] as Program | undefined;
      found.push({ where: `${o.kind}/${o.metadata.name}/${container.name}`, kind: o.kind, program: program ?? ('unknown' as Program), pod, container });
    }
  }
  return found;
}

const configMaps = (objects: K8sObject[]) => new Map(objects.filter((o) => o.kind === 'ConfigMap').map((o) => [o.metadata.name, ((o as Any).data ?? {}) as Record<string, string>]));

/** Deployments' containers: liveness on /healthz, readiness on /readyz, a startup probe longer than the program's own deadlines. */
export function probeProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  for (const { where, kind, program, container } of containers(objects)) {
    if (kind !== 'Deployment') continue;
    const ports = new Set((container.ports ?? []).map((p: Any) => p.name));
    const probe = (name: string, path: string) => {
      const p = container[name];
      if (!p?.httpGet) return problems.push(`${where}: no ${name} (httpGet)`);
      if (p.httpGet.path !== path) problems.push(`${where}: ${name} on ${p.httpGet.path}, not ${path}`);
      if (!ports.has(p.httpGet.port)) problems.push(`${where}: ${name} on port ${p.httpGet.port}, which the container does not name`);
      return undefined;
    };
    probe('livenessProbe', '/healthz');
    probe('readinessProbe', '/readyz');
    probe('startupProbe', '/readyz');
    const startup = container.startupProbe;
    if (startup) {
      const windowMs = (startup.periodSeconds ?? 10) * (startup.failureThreshold ?? 3) * 1000;
      if (!(windowMs > START_DEADLINE_MS[program])) problems.push(`${where}: startup probe allows ${windowMs} ms, not more than the program's start-up deadlines (${START_DEADLINE_MS[program]} ms)`);
    }
  }
  return problems;
}

/** A Kubernetes quantity as a number (cores, bytes). */
export function quantity(text: unknown): number {
  const m = /^(\d+(?:\.\d+)?)(m|k|M|G|Ki|Mi|Gi|Ti)?$/.exec(String(text));
  if (!m) return Number.NaN;
  const unit = { m: 1e-3, k: 1e3, M: 1e6, G: 1e9, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 }[m[2] ?? ''] ?? 1;
  return Number(m[1]) * unit;
}

/**
 * The most resident memory each program was measured to hold, in MiB: a memory limit below it has
 * the kubelet kill the program just when it does that work. The API and the dispatcher ready with
 * 100,000 merchants (docs/sizing.md; the dispatcher's start-up, BENCHMARKS.md 7b), the recorder
 * catching up a backlog of the deliveries stream (BENCHMARKS.md 8a, its VmHWM).
 */
export const MEASURED_PEAK_MIB: Partial<Record<Program, number>> = { api: 216, dispatcher: 238, recorder: 280 };

/** Every container: requests and limits of CPU and memory, each request within its limit, the memory limit above the program's measured peak. */
export function resourceProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  for (const { where, program, container } of containers(objects)) {
    for (const resource of ['cpu', 'memory']) {
      const request = quantity(container.resources?.requests?.[resource]);
      const limit = quantity(container.resources?.limits?.[resource]);
      if (Number.isNaN(request) || Number.isNaN(limit)) problems.push(`${where}: ${resource} needs a request and a limit`);
      else if (request > limit) problems.push(`${where}: ${resource} request above its limit`);
    }
    const peak = MEASURED_PEAK_MIB[program];
    const limit = quantity(container.resources?.limits?.memory) / 2 ** 20;
    if (peak !== undefined && limit <= peak) problems.push(`${where}: memory limit ${limit} MiB, not above the ${peak} MiB it was measured to hold`);
  }
  return problems;
}

/**
 * The migrate Job: no deadline, since `webhooks migrate` has none (a migration of a large table
 * takes what it takes): a Job past activeDeadlineSeconds kills it mid-statement, PostgreSQL runs
 * the statement on with its locks until it finds the client gone, and the Job is never retried;
 * and retries, since a migration that waited 5 s for a table's lock exits 1 for the Job to run again.
 */
export function jobProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  for (const job of objects.filter((o) => o.kind === 'Job') as Any[]) {
    const where = `Job/${job.metadata.name}`;
    if (job.spec.activeDeadlineSeconds !== undefined) problems.push(`${where}: activeDeadlineSeconds ${job.spec.activeDeadlineSeconds} kills a migration that runs without a deadline`);
    if (!((job.spec.backoffLimit ?? 6) >= 1)) problems.push(`${where}: backoffLimit ${job.spec.backoffLimit}: a migration that gave up on a table's lock is not run again`);
  }
  return problems;
}

/** Every pod and container: non-root, read-only root, no capability, no escalation, no service account token. */
export function securityProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  for (const { where, pod, container } of containers(objects)) {
    const sc = container.securityContext ?? {};
    if (pod.automountServiceAccountToken !== false) problems.push(`${where}: the service account token is mounted`);
    if ((sc.runAsNonRoot ?? pod.securityContext?.runAsNonRoot) !== true) problems.push(`${where}: not runAsNonRoot`);
    if ((sc.runAsUser ?? pod.securityContext?.runAsUser) === 0) problems.push(`${where}: runs as user 0`);
    if (sc.readOnlyRootFilesystem !== true) problems.push(`${where}: root filesystem not read-only`);
    if (sc.allowPrivilegeEscalation !== false) problems.push(`${where}: privilege escalation allowed`);
    if (!(sc.capabilities?.drop ?? []).includes('ALL') || (sc.capabilities?.add ?? []).length > 0) problems.push(`${where}: capabilities not all dropped`);
  }
  return problems;
}

/** The environment a container gets: its ConfigMaps' data, its values, and its Secret references resolved from `secrets`. */
function environment(c: Container, maps: Map<string, Record<string, string>>, secrets: Map<string, Record<string, string>>, problems: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of c.container.envFrom ?? []) {
    const data = from.configMapRef ? maps.get(from.configMapRef.name) : undefined;
    if (!data) problems.push(`${c.where}: envFrom names no ConfigMap of the overlay (${JSON.stringify(from)})`);
    Object.assign(env, data);
  }
  for (const e of c.container.env ?? []) {
    const ref = e.valueFrom?.secretKeyRef;
    if (ref) {
      const value = secrets.get(ref.name)?.[ref.key];
      // The kubelet starts a container whose optional reference finds no key, the variable unset; any other such reference keeps it from starting.
      if (value === undefined && ref.optional !== true) problems.push(`${c.where}: ${e.name} from Secret ${ref.name} key ${ref.key}, which the documented commands do not create`);
      else if (value !== undefined) env[e.name] = value;
    } else if (e.value !== undefined) env[e.name] = e.value;
  }
  return env;
}

/**
 * ConfigMaps and containers' variables: each documented (docs/configuration.md), no secret among
 * the ConfigMaps' or in a plain value; and each container's environment, the documented Secrets'
 * values in place, passes its program's own configuration schema (so every required variable is
 * set or referenced), with the container's ports where the variables put the program.
 */
export function configurationProblems(objects: K8sObject[], documented: Set<string>, secrets: Map<string, Record<string, string>>): string[] {
  const problems: string[] = [];
  const maps = configMaps(objects);
  for (const [name, data] of maps) {
    for (const key of Object.keys(data)) {
      if (!documented.has(key)) problems.push(`ConfigMap/${name}: ${key} is not a documented variable`);
      if (SECRET_VARIABLES.includes(key)) problems.push(`ConfigMap/${name}: ${key} is a secret, written in a manifest`);
    }
  }
  for (const c of containers(objects)) {
    for (const e of c.container.env ?? []) {
      if (!documented.has(e.name)) problems.push(`${c.where}: ${e.name} is not a documented variable`);
      if (SECRET_VARIABLES.includes(e.name) && !e.valueFrom?.secretKeyRef) problems.push(`${c.where}: ${e.name} is a secret, not from a Secret`);
    }
    const env = environment(c, maps, secrets, problems);
    const parsed = SCHEMAS[c.program]?.safeParse(env);
    if (!parsed) problems.push(`${c.where}: runs no known program`);
    else if (!parsed.success) problems.push(...parsed.error.issues.map((i) => `${c.where}: ${i.path.join('.')}: ${i.message}`));
    if (c.kind === 'Job' && !env.DATABASE_URL) problems.push(`${c.where}: migrate without DATABASE_URL`);
    for (const variable of RECOMMENDED[c.program] ?? []) if (!env[variable]) problems.push(`${c.where}: ${variable} unset, which docs/production.md recommends`);
    if (!parsed?.success) continue;
    const config = parsed.data as Record<string, unknown>;
    for (const port of c.container.ports ?? []) {
      const variable = { http: 'PORT', admin: 'ADMIN_PORT', metrics: 'METRICS_PORT' }[port.name as string];
      if (variable && config[variable] !== port.containerPort) problems.push(`${c.where}: port ${port.name} is ${port.containerPort}, ${variable} ${String(config[variable])}`);
    }
  }
  for (const auth of objects.filter((o) => o.kind === 'TriggerAuthentication')) {
    for (const ref of (auth as Any).spec.secretTargetRef ?? []) {
      if (secrets.get(ref.name)?.[ref.key] === undefined) problems.push(`TriggerAuthentication/${auth.metadata.name}: Secret ${ref.name} key ${ref.key}, which the documented commands do not create`);
    }
  }
  return problems;
}

/**
 * Deployments: every secret their program reads is referenced from a Secret (optional where the
 * documented commands do not create it), so that rotating SECRETS_KEY (SECRETS_KEY_PREVIOUS), the
 * operational webhook's secret or JWKS in place of AUTH_JWT_SECRET is an edit of the Secret (and
 * the ConfigMap), never of a Deployment; a secret cannot go in the ConfigMap.
 */
export function secretReferenceProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  for (const c of containers(objects).filter((x) => x.kind === 'Deployment')) {
    const reads = Object.keys((SCHEMAS[c.program] as Any)?.shape ?? {});
    const referenced = new Set((c.container.env ?? []).filter((e: Any) => e.valueFrom?.secretKeyRef).map((e: Any) => e.name));
    for (const variable of SECRET_VARIABLES.filter((v) => reads.includes(v) && !referenced.has(v))) problems.push(`${c.where}: ${variable}, which the program reads, is not referenced from a Secret`);
  }
  return problems;
}

/**
 * Fields of the manifests that older Kubernetes versions refuse, with the first version that takes
 * them by default: a `sleep` preStop is refused before 1.30 (its feature gate off: "must specify a
 * handler type"), unhealthyPodEvictionPolicy before 1.27.
 */
const FIELD_SINCE: Array<{ field: string; minor: number; uses: (o: Any) => boolean }> = [
  { field: 'a preStop sleep', minor: 30, uses: (o) => (o.spec?.template?.spec?.containers ?? []).some((c: Any) => c.lifecycle?.preStop?.sleep) },
  { field: 'unhealthyPodEvictionPolicy', minor: 27, uses: (o) => o.kind === 'PodDisruptionBudget' && o.spec.unhealthyPodEvictionPolicy !== undefined },
];

/** The Kubernetes version the guide asks for ("Kubernetes 1.N or later") takes every field the objects use. */
export function versionProblems(objects: K8sObject[], guide: string): string[] {
  const stated = /Kubernetes 1\.(\d+) or later/.exec(guide);
  const needed = FIELD_SINCE.filter((f) => objects.some((o) => f.uses(o)));
  if (!stated) return needed.length > 0 ? [`the guide names no Kubernetes version, and the manifests use ${needed.map((f) => `${f.field} (1.${f.minor})`).join(', ')}`] : [];
  return needed.filter((f) => f.minor > Number(stated[1])).map((f) => `the guide asks for Kubernetes 1.${stated[1]}, which refuses ${f.field} (1.${f.minor})`);
}

/** Deployments: a grace period above the program's stop deadline (SHUTDOWN_TIMEOUT, or 35 s) with its preStop pause. */
export function graceProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  const maps = configMaps(objects);
  for (const c of containers(objects).filter((x) => x.kind === 'Deployment')) {
    const fromMap = (c.container.envFrom ?? []).map((f: Any) => maps.get(f.configMapRef?.name)?.SHUTDOWN_TIMEOUT).find(Boolean);
    const reads = 'SHUTDOWN_TIMEOUT' in ((SCHEMAS[c.program] as Any)?.shape ?? {});
    const stopMs = reads ? parseDuration(fromMap ?? '30s')! : STOP.defaultMs;
    const pauseMs = (c.container.lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000;
    const graceMs = (c.pod.terminationGracePeriodSeconds ?? 30) * 1000;
    if (!(graceMs > stopMs + STOP.backstopMs + pauseMs)) problems.push(`${c.where}: terminationGracePeriodSeconds ${graceMs / 1000} s, not above the stop deadline ${stopMs / 1000} s + ${STOP.backstopMs / 1000} s + preStop ${pauseMs / 1000} s`);
  }
  return problems;
}

/** No Secret is written in the manifests with a value: the operator creates them. */
export function secretValueProblems(objects: K8sObject[]): string[] {
  return objects
    .filter((o) => o.kind === 'Secret' && (Object.keys((o as Any).data ?? {}).length > 0 || Object.keys((o as Any).stringData ?? {}).length > 0))
    .map((o) => `Secret/${o.metadata.name} holds values in a manifest`);
}

/** Every PrometheusRule is docker/alerts.yml, to the letter of its rules. */
export function ruleProblems(objects: K8sObject[], alertsYaml: string): string[] {
  const rules = parse(alertsYaml) as unknown;
  return objects
    .filter((o) => o.kind === 'PrometheusRule' && !isDeepStrictEqual((o as Any).spec, rules))
    .map((o) => `PrometheusRule/${o.metadata.name} differs from docker/alerts.yml: npm run k8s:rules`);
}

/** A range as `net/prefix`. */
const cidr = ([net, prefix]: readonly [string, number]) => `${net}/${prefix}`;

/** Whether `outer` (a CIDR) holds all of `inner` (a CIDR of the same family). */
function contains(outer: string, inner: string): boolean {
  const [net, bits] = outer.split('/') as [string, string];
  const [innerNet, innerBits] = inner.split('/') as [string, string];
  const family = isIP(net) === 6 ? 'ipv6' : 'ipv4';
  if (family !== (isIP(innerNet) === 6 ? 'ipv6' : 'ipv4') || Number(bits) > Number(innerBits)) return false;
  const list = new BlockList();
  list.addSubnet(net, Number(bits), family);
  return list.check(innerNet, family);
}

/**
 * The dispatcher's NetworkPolicy: ingress and egress both governed; nothing in but the metrics
 * port; out to the whole internet only with every range the dispatcher's own check refuses
 * excepted (libs/http/address-guard.ts: private, shared, link-local, Azure's wireserver, NAT64 and
 * the other IPv6 ranges that carry an IPv4 address), and to private peers (pods, or blocks inside
 * those ranges) only on named ports: the broker's and the database's, and DNS.
 */
export function networkProblems(objects: K8sObject[]): string[] {
  const policies = objects.filter((o) => o.kind === 'NetworkPolicy' && (o as Any).spec.podSelector?.matchLabels?.['app.kubernetes.io/component'] === 'dispatcher') as Any[];
  if (policies.length !== 1) return [`${policies.length} NetworkPolicies select the dispatcher, not 1`];
  const spec = policies[0].spec;
  const problems: string[] = [];
  if (!['Ingress', 'Egress'].every((t) => spec.policyTypes?.includes(t))) problems.push('the policy does not govern both ingress and egress');
  for (const rule of spec.ingress ?? []) {
    if (!(rule.ports?.length > 0 && rule.ports.every((p: Any) => p.port === 'metrics' || p.port === 9464))) problems.push(`ingress beyond the metrics port: ${JSON.stringify(rule)}`);
  }
  const refused = [...BLOCKED_RANGES, RESERVED_V6].map(cidr);
  for (const rule of spec.egress ?? []) {
    for (const peer of rule.to ?? [{ ipBlock: { cidr: '0.0.0.0/0' } }]) {
      const block = peer.ipBlock;
      if (!block) {
        if (!(rule.ports?.length > 0)) problems.push(`egress to ${JSON.stringify(peer)} on every port`);
        continue;
      }
      const missing = refused.filter((range) => contains(block.cidr, range) && !(block.except ?? []).some((except: string) => contains(except, range)));
      if (missing.length > 0) problems.push(`egress to ${block.cidr} lets the dispatcher reach ${missing.join(', ')}`);
      // A block inside a refused range is a private peer: on its ports only, as the pods' rules.
      const inside = refused.find((range) => contains(range, block.cidr));
      if (inside && !(rule.ports?.length > 0)) problems.push(`egress to ${block.cidr}, inside ${inside}, on every port`);
    }
  }
  return problems;
}

/**
 * Each ServiceMonitor finds a metrics port on every program's Service, and names the jobs as the
 * rules' `up{job=~"…"}` expects (docker/alerts.yml: api, dispatcher, recorder).
 */
export function scrapeProblems(objects: K8sObject[], alertsYaml: string): string[] {
  const expected = (/up\{job=~"([^"]+)"\}/.exec(alertsYaml)?.[1] ?? '').split('|').sort();
  const problems: string[] = [];
  for (const monitor of objects.filter((o) => o.kind === 'ServiceMonitor') as Any[]) {
    const selector: Record<string, string> = monitor.spec.selector?.matchLabels ?? {};
    const services = objects.filter((o) => o.kind === 'Service' && Object.entries(selector).every(([k, v]) => o.metadata.labels?.[k] === v)) as Any[];
    const jobs: string[] = [];
    for (const service of services) {
      const scraped = monitor.spec.endpoints.some((e: Any) => service.spec.ports.some((p: Any) => p.name === e.port));
      if (scraped) jobs.push(service.metadata.labels?.[monitor.spec.jobLabel] ?? service.metadata.name);
    }
    if (!isDeepStrictEqual(jobs.sort(), expected)) problems.push(`ServiceMonitor/${monitor.metadata.name} scrapes the jobs ${jobs.join(', ')}; the rules expect ${expected.join(', ')}`);
  }
  return problems;
}

/**
 * Each PodDisruptionBudget selects one Deployment's pods, lets one go at the fewest replicas the
 * Deployment may run (its autoscaler's floor, else its replicas), and lets a pod that is not ready
 * be evicted whatever the budget (AlwaysAllow). Under the default, IfHealthyBudget, pods that never
 * become ready (a crash loop after a bad release, RabbitMQ down for the dispatchers, PostgreSQL for
 * the API) can be evicted by nobody: every `kubectl drain` of their nodes waits for ever.
 */
export function budgetProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  const deployments = objects.filter((o) => o.kind === 'Deployment') as Any[];
  const floor = (name: string, deployment: Any): number => {
    const hpa = objects.find((o) => o.kind === 'HorizontalPodAutoscaler' && (o as Any).spec.scaleTargetRef?.name === name) as Any;
    const scaled = objects.find((o) => o.kind === 'ScaledObject' && (o as Any).spec.scaleTargetRef?.name === name) as Any;
    return hpa?.spec.minReplicas ?? scaled?.spec.minReplicaCount ?? deployment.spec.replicas ?? 1;
  };
  for (const budget of objects.filter((o) => o.kind === 'PodDisruptionBudget') as Any[]) {
    const where = `PodDisruptionBudget/${budget.metadata.name}`;
    const selector: Record<string, string> = budget.spec.selector?.matchLabels ?? {};
    const selected = deployments.filter((d) => Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => d.spec.template.metadata?.labels?.[k] === v));
    if (selected.length !== 1) {
      problems.push(`${where} selects the pods of ${selected.length} Deployments, not 1`);
      continue;
    }
    if (budget.spec.unhealthyPodEvictionPolicy !== 'AlwaysAllow') problems.push(`${where}: unhealthyPodEvictionPolicy ${budget.spec.unhealthyPodEvictionPolicy ?? 'unset (IfHealthyBudget)'}, not AlwaysAllow: pods that are not ready block every drain`);
    const replicas = floor(selected[0].metadata.name, selected[0]);
    const { maxUnavailable, minAvailable } = budget.spec;
    const allowed = maxUnavailable !== undefined ? (typeof maxUnavailable === 'number' ? maxUnavailable : Math.ceil((replicas * parseInt(maxUnavailable, 10)) / 100)) : minAvailable !== undefined ? replicas - (typeof minAvailable === 'number' ? minAvailable : Math.ceil((replicas * parseInt(minAvailable, 10)) / 100)) : 0;
    if (!(allowed >= 1)) problems.push(`${where}: allows ${allowed} of ${replicas} replicas to go: a drain never evicts one`);
  }
  return problems;
}

/**
 * Each CloudNativePG Cluster commits synchronously to a standby, with one standby to spare and a
 * failover that promotes only one holding every answered commit: a dispatcher acks a webhook once its
 * wait committed, which an asynchronous standby promoted would not have.
 */
export function durabilityProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  for (const cluster of objects.filter((o) => o.kind === 'Cluster' && o.apiVersion?.startsWith('postgresql.cnpg.io/')) as Any[]) {
    const where = `Cluster/${cluster.metadata.name}`;
    const sync = cluster.spec.postgresql?.synchronous;
    if (!(sync?.number >= 1) || sync.dataDurability === 'preferred') problems.push(`${where}: commits do not wait for a standby: a failover loses acked waits`);
    else if (!((cluster.spec.instances ?? 1) >= sync.number + 2)) problems.push(`${where}: ${cluster.spec.instances} instances for ${sync.number} synchronous: one standby down stops every write`);
    else if (sync.failoverQuorum !== true) problems.push(`${where}: no failoverQuorum: a standby behind the answered commits may be promoted`);
  }
  return problems;
}

/** The labels of the programs' series: docs/operating.md's table of them (`webhooks_x{a,b}`, kept to the code by docs-metrics-routes.test.ts), and `program` on every sample. */
export function seriesLabels(operatingMd: string): Set<string> {
  const section = operatingMd.split('\n## Metrics and health\n')[1]!.split('\n## ')[0]!;
  const labels = new Set(['program']);
  for (const m of section.matchAll(/`webhooks_[a-z_]+\{([^}]*)\}`/g)) for (const l of m[1]!.split(',')) labels.add(l.trim());
  return labels;
}

/** What the Prometheus Operator labels every target of a ServiceMonitor with. */
const TARGET_LABELS = ['job', 'instance', 'namespace', 'service', 'pod', 'container', 'endpoint'];

/**
 * A series' own label that a ServiceMonitor's target also sets is stored as exported_<label>, the
 * target's value in its place (webhooks_circuit_open{endpoint} would read endpoint="metrics", every
 * circuit one line): each such label is honoured (honorLabels) or dropped from the targets.
 */
export function scrapeLabelProblems(objects: K8sObject[], labels: Set<string>): string[] {
  const problems: string[] = [];
  for (const monitor of objects.filter((o) => o.kind === 'ServiceMonitor') as Any[]) {
    for (const endpoint of monitor.spec.endpoints ?? []) {
      if (endpoint.honorLabels === true) continue;
      const dropped = (endpoint.relabelings ?? []).filter((r: Any) => String(r.action).toLowerCase() === 'labeldrop').map((r: Any) => new RegExp(`^(?:${r.regex})$`));
      for (const label of TARGET_LABELS.filter((l) => labels.has(l) && !dropped.some((re: RegExp) => re.test(l)))) {
        problems.push(`ServiceMonitor/${monitor.metadata.name} port ${endpoint.port}: the series' label ${label} is also the target's, so it would be stored as exported_${label}`);
      }
    }
  }
  return problems;
}

/**
 * Each Deployment spreads its own pods across nodes (a constraint on kubernetes.io/hostname whose
 * selector picks its pods), so that a node's loss leaves a replica: the dispatchers' competing
 * consumer, the recorders' standby, which exists only to take the lead when the leader is lost.
 */
export function spreadProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  for (const deployment of objects.filter((o) => o.kind === 'Deployment') as Any[]) {
    const labels: Record<string, string> = deployment.spec.template.metadata?.labels ?? {};
    const own = (deployment.spec.template.spec.topologySpreadConstraints ?? []).filter(
      (c: Any) => c.topologyKey === 'kubernetes.io/hostname' && c.maxSkew === 1 && Object.keys(c.labelSelector?.matchLabels ?? {}).length > 0 && Object.entries(c.labelSelector.matchLabels).every(([k, v]) => labels[k] === v),
    );
    if (own.length === 0) problems.push(`Deployment/${deployment.metadata.name}: its pods are not spread across nodes (no topologySpreadConstraint on kubernetes.io/hostname, maxSkew 1, selecting them)`);
  }
  return problems;
}
