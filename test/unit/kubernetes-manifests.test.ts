import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import {
  budgetProblems,
  durabilityProblems,
  configurationProblems,
  containers,
  graceProblems,
  jobProblems,
  networkProblems,
  probeProblems,
  resourceProblems,
  ruleProblems,
  scrapeLabelProblems,
  scrapeProblems,
  secretReferenceProblems,
  secretValueProblems,
  seriesLabels,
  spreadProblems,
  securityProblems,
  versionProblems,
} from '../support/kubernetes-checks.js';
import { documentedVariables, KUBECTL, type K8sObject, parseRendered, renderedFile, renderText, REPO, schemaProblems } from '../support/kubernetes.js';
import { unknownFieldProblems } from '../support/kubernetes-types.js';

/**
 * deploy/kubernetes, offline: docs/production.md's Kubernetes section is run once per overlay, as
 * the operator of that overlay follows it on a cluster of their own: its blocks marked
 * `<!-- kubernetes -->` (every overlay's) and `<!-- kubernetes: <overlay> -->` (that one's), in
 * order, in one bash, with a stand-in for kubectl that renders each `apply -k` with the real
 * `kubectl kustomize`, makes each Secret with `--dry-run=client` and refuses what a fresh cluster
 * would: a namespace not made yet, a Secret made twice (test/support/fake-kubectl.mjs). The
 * overlays applied must be all of them, each by its own run only; every object of
 * every overlay is valid against its schema (test/support/kubernetes.ts) and passes the checks of
 * test/support/kubernetes-checks.ts, each of which is also seen failing on a mistake planted in a
 * copy. Needs kubectl (the machine image has it; KUBECTL names another) and no cluster or broker.
 */
const GUIDE = readFileSync(join(REPO, 'docs/production.md'), 'utf8');
const SECTION = GUIDE.split('\n## Kubernetes\n')[1]!.split('\n## ')[0]!;
const OVERLAYS = readdirSync(join(REPO, 'deploy/kubernetes/overlays')).map((d) => `deploy/kubernetes/overlays/${d}`).sort();
const ALERTS = readFileSync(join(REPO, 'docker/alerts.yml'), 'utf8');
const LABELS = seriesLabels(readFileSync(join(REPO, 'docs/operating.md'), 'utf8'));

interface Call {
  args: string[];
  objects: K8sObject[];
}

function blocks(): Array<{ marker?: string; code: string }> {
  return [...SECTION.matchAll(/(?:<!-- (kubernetes(?:: [a-z ]+)?) -->\n)?```sh\n([\s\S]*?)```/g)].map((m) => ({ marker: m[1], code: m[2]! }));
}

/** The blocks an overlay's operator runs: every overlay's, and that overlay's own. */
const runFor = (overlay: string) => (b: { marker?: string }) => b.marker === 'kubernetes' || b.marker === `kubernetes: ${basename(overlay)}`;

/** What the production overlay's operator has in their shell, as the guide asks: their own RabbitMQ's and PostgreSQL's addresses. */
const OWN_ADDRESSES = {
  RABBITMQ_URL: 'amqps://webhooks:placeholder@rabbitmq.example.com:5671/webhooks',
  DATABASE_URL: 'postgres://webhooks:placeholder@postgres.example.com:5432/webhooks?sslmode=verify-full',
};

/**
 * The section's commands, run with the stand-in: every kubectl call, in order. `renderings`: each
 * directory's `kubectl kustomize`, made once here for the test's own checks and for every call of
 * the guide that applies it (a rendering is some 0.3 s of kubectl each time).
 */
function runGuide(renderings: Map<string, string>, overlay: string, code = blocks().filter(runFor(overlay)).map((b) => b.code)): Call[] {
  const tmp = mkdtempSync(join(tmpdir(), 'kubernetes-guide-'));
  try {
    mkdirSync(join(tmp, 'rendered'));
    // A fresh cluster: its own namespaces only.
    mkdirSync(join(tmp, 'state'));
    writeFileSync(join(tmp, 'state/namespaces'), 'default\nkube-system\nkube-public\n');
    for (const [dir, text] of renderings) writeFileSync(renderedFile(join(tmp, 'rendered'), dir), text);
    writeFileSync(join(tmp, 'kubectl'), `#!/bin/sh\nexec sh "${join(REPO, 'test/support/fake-kubectl.sh')}" "$@"\n`);
    chmodSync(join(tmp, 'kubectl'), 0o755);
    const script = ['set -euo pipefail', ...code].join('\n');
    const log = join(tmp, 'calls.jsonl');
    const run = spawnSync('bash', ['-c', script], {
      cwd: REPO,
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...OWN_ADDRESSES, PATH: `${tmp}:${process.env.PATH}`, HOME: tmp, FAKE_KUBECTL_LOG: log, FAKE_KUBECTL_NODE: process.execPath, FAKE_KUBECTL_REAL: KUBECTL, FAKE_KUBECTL_RENDERED: join(tmp, 'rendered'), FAKE_KUBECTL_STATE: join(tmp, 'state') },
    });
    if (run.status !== 0) throw new Error(`the guide's Kubernetes commands for ${overlay} exited ${run.status}: ${run.stderr}${run.error?.message ?? ''}`);
    return readFileSync(log, 'utf8').trim().split('\n').map((line) => JSON.parse(line) as Call);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

const kustomized = (call: Call) => call.args[call.args.indexOf('-k') + 1];
const decoded = (secret: K8sObject) => Object.fromEntries(Object.entries((secret as { data?: Record<string, string> }).data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]));
const migrates = (c: Call) => c.objects.some((o) => o.kind === 'Job');
const waitsForMigrate = (c: Call) => c.args.includes('wait') && c.args.includes('job/webhooks-migrate') && c.args.includes('--for=condition=complete');

/** Each apply of programs comes after an apply of the same overlay's Job, and a wait for its completion between the two. */
function migrateOrderProblems(list: Call[]): string[] {
  const problems: string[] = [];
  list.forEach((c, i) => {
    if (!c.objects.some((o) => o.kind === 'Deployment')) return;
    const job = list.findLastIndex((x, j) => j < i && x.args.includes('-k') && kustomized(x) === kustomized(c) && migrates(x));
    if (job < 0 || !list.slice(job, i).some(waitsForMigrate)) problems.push(`kubectl ${c.args.join(' ')}: the programs without the migrate Job completed before`);
  });
  return problems;
}

const clone = (objects: K8sObject[]) => structuredClone(objects);
const named = (objects: K8sObject[], kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name) as unknown as { spec: any };
const podOf = (objects: K8sObject[], name: string) => named(objects, 'Deployment', name).spec.template.spec;

const secretsOf = (list: Call[]) => new Map(list.flatMap((c) => c.objects.filter((o) => o.kind === 'Secret').map((s): [string, Record<string, string>] => [s.metadata.name, decoded(s)])));

describe('deploy/kubernetes', () => {
  /** Each overlay's run of the guide, and the Secrets it made; the base is checked with production's. */
  const runs = new Map<string, Call[]>();
  const secretsFor = new Map<string, Map<string, Record<string, string>>>();
  const rendered = new Map<string, K8sObject[]>();
  const documented = documentedVariables();
  const EXAMPLE = 'deploy/kubernetes/overlays/example';
  let calls: Call[];
  let secrets: Map<string, Record<string, string>>;
  let renderings: Map<string, string>;

  beforeAll(() => {
    renderings = new Map(['deploy/kubernetes/base', ...OVERLAYS].map((dir) => [dir, renderText(dir)]));
    for (const [dir, text] of renderings) rendered.set(dir, parseRendered(text));
    for (const overlay of OVERLAYS) {
      runs.set(overlay, runGuide(renderings, overlay));
      secretsFor.set(overlay, secretsOf(runs.get(overlay)!));
    }
    secretsFor.set('deploy/kubernetes/base', secretsFor.get('deploy/kubernetes/overlays/production')!);
    calls = runs.get(EXAMPLE)!;
    secrets = secretsFor.get(EXAMPLE)!;
  }, 180_000);

  it('marks every shell block of the guide\'s section as run (for every overlay, or for one) or not run', () => {
    const markers = ['kubernetes', 'kubernetes: not run', ...OVERLAYS.map((o) => `kubernetes: ${basename(o)}`)];
    expect(blocks().filter((b) => !markers.includes(b.marker!)).map((b) => `${b.marker}: ${b.code}`)).toEqual([]);
    for (const overlay of OVERLAYS) expect(blocks().filter(runFor(overlay)).length).toBeGreaterThanOrEqual(3);
  });

  it('applies, in the guide\'s commands, every overlay there is, each in its own run, and no other directory', () => {
    for (const [overlay, list] of runs) expect({ overlay, applied: [...new Set(list.filter((c) => c.args.includes('-k')).map(kustomized))] }).toEqual({ overlay, applied: [overlay] });
    expect([...runs.keys()].sort()).toEqual(OVERLAYS);
    expect(OVERLAYS).toContain(EXAMPLE);
  });

  it('validates every object of every overlay against the pinned schemas, with no field its kind lacks', async () => {
    const problems = await schemaProblems([...rendered.values()].flat());
    expect(problems).toEqual([]);
    // One compile for every overlay's objects: a compile is seconds.
    expect(unknownFieldProblems([...rendered.values()].flat())).toEqual([]);
    const example = rendered.get('deploy/kubernetes/overlays/example')!.map((o) => o.kind);
    expect(example).toEqual(expect.arrayContaining(['RabbitmqCluster', 'Cluster', 'ScaledObject', 'TriggerAuthentication', 'ServiceMonitor', 'PrometheusRule', 'HorizontalPodAutoscaler', 'NetworkPolicy', 'Job']));
  }, 180_000);

  it('gives each program a Deployment, a PodDisruptionBudget, and the schema a Job', () => {
    for (const objects of rendered.values()) {
      const programs = containers(objects).map((c) => `${c.kind} ${c.program}`).sort();
      expect(programs).toEqual(['Deployment api', 'Deployment dispatcher', 'Deployment recorder', 'Job cli']);
      expect(containers(objects).find((c) => c.kind === 'Job')!.container.command).toEqual(['node', 'dist/apps/cli/main.js', 'migrate']);
      const budgets = objects.filter((o) => o.kind === 'PodDisruptionBudget').map((o) => (o as unknown as { spec: { selector: { matchLabels: Record<string, string> } } }).spec.selector.matchLabels['app.kubernetes.io/component']);
      expect(budgets.sort()).toEqual(['api', 'dispatcher', 'recorder']);
      expect(new Set(containers(objects).map((c) => c.container.image)).size).toBe(1);
    }
  });

  it('gives every container its probes, resources, security context and grace period; the migrate Job no deadline, and retries', () => {
    for (const [dir, objects] of rendered) {
      const problems = [...probeProblems(objects), ...resourceProblems(objects), ...securityProblems(objects), ...graceProblems(objects), ...jobProblems(objects)];
      expect({ dir, problems }).toEqual({ dir, problems: [] });
    }
  });

  it('lets a drain evict one pod of each program, and any pod that is not ready; spreads each program\'s pods across nodes', () => {
    for (const [dir, objects] of rendered) expect({ dir, problems: [...budgetProblems(objects), ...spreadProblems(objects)] }).toEqual({ dir, problems: [] });
  });

  it("keeps PostgreSQL's answered commits through a failover: a synchronous standby, one to spare", () => {
    for (const [dir, objects] of rendered) expect({ dir, problems: durabilityProblems(objects) }).toEqual({ dir, problems: [] });
  });

  it('asks for a Kubernetes version that takes every field the manifests use', () => {
    for (const [dir, objects] of rendered) expect({ dir, problems: versionProblems(objects, SECTION) }).toEqual({ dir, problems: [] });
    expect(versionProblems(rendered.get(EXAMPLE)!, SECTION.replace(/Kubernetes 1\.\d+ or later/, 'Kubernetes 1.29 or later'))).toEqual(['the guide asks for Kubernetes 1.29, which refuses a preStop sleep (1.30)']);
  });

  it('runs the pods as the image\'s own numeric user, which runAsNonRoot can verify', () => {
    const dockerfile = readFileSync(join(REPO, 'docker/Dockerfile'), 'utf8');
    const user = /^USER\s+(\S+)/m.exec(dockerfile.split(/^FROM\s/m).at(-1)!)?.[1];
    for (const objects of rendered.values()) {
      const users = new Set(containers(objects).map(({ pod }) => `${pod.securityContext?.runAsUser}:${pod.securityContext?.runAsGroup}`));
      expect([...users]).toEqual([user]);
    }
    expect(user).toMatch(/^[1-9]\d*:[1-9]\d*$/);
  });

  it('configures only documented variables, secrets only from the Secrets the guide creates, every program starting', () => {
    for (const [dir, objects] of rendered) expect({ dir, problems: configurationProblems(objects, documented, secretsFor.get(dir)!) }).toEqual({ dir, problems: [] });
    for (const [overlay, made] of secretsFor) expect({ overlay, secrets: [...made.keys()] }).toEqual({ overlay, secrets: ['webhooks-secrets'] });
  });

  it('references every secret a program reads, so that each is given by the Secret alone: JWKS in place of AUTH_JWT_SECRET starts the API', () => {
    for (const [dir, objects] of rendered) expect({ dir, problems: secretReferenceProblems(objects) }).toEqual({ dir, problems: [] });
    // docs/production.md, "Configuration": AUTH_JWKS_URL in the ConfigMap, AUTH_JWT_SECRET left out of the Secret.
    const production = 'deploy/kubernetes/overlays/production';
    const objects = clone(rendered.get(production)!);
    (objects.find((o) => o.kind === 'ConfigMap') as unknown as { data: Record<string, string> }).data.AUTH_JWKS_URL = 'https://auth.example.com/.well-known/jwks.json';
    const withoutJwtSecret = new Map([...secretsFor.get(production)!].map(([name, data]): [string, Record<string, string>] => [name, Object.fromEntries(Object.entries(data).filter(([key]) => key !== 'AUTH_JWT_SECRET'))]));
    expect(configurationProblems(objects, documented, withoutJwtSecret)).toEqual([]);
  });

  it('writes no Secret with a value; the PrometheusRule is docker/alerts.yml, the ServiceMonitor scrapes the jobs it names', () => {
    for (const [dir, objects] of rendered) expect({ dir, problems: [...secretValueProblems(objects), ...ruleProblems(objects, ALERTS), ...scrapeProblems(objects, ALERTS)] }).toEqual({ dir, problems: [] });
    expect(rendered.get('deploy/kubernetes/overlays/example')!.some((o) => o.kind === 'PrometheusRule')).toBe(true);
  });

  it('keeps the series\' own labels under the Prometheus Operator\'s scrape', () => {
    expect([...LABELS]).toEqual(expect.arrayContaining(['program', 'outcome', 'endpoint', 'queue']));
    for (const [dir, objects] of rendered) expect({ dir, problems: scrapeLabelProblems(objects, LABELS) }).toEqual({ dir, problems: [] });
  });

  it('lets the dispatcher out to the internet and not to private ranges, and only the scrape in', () => {
    for (const [dir, objects] of rendered) expect({ dir, problems: networkProblems(objects) }).toEqual({ dir, problems: [] });
  });

  it('migrates before the programs roll, at install and at upgrade; rolls every program back', () => {
    for (const [overlay, list] of runs) expect({ overlay, problems: migrateOrderProblems(list) }).toEqual({ overlay, problems: [] });
    // The upgrade deletes the last release's Job before applying its own (a Job's pods cannot change).
    const deleted = calls.findIndex((c) => c.args.includes('delete') && c.args.includes('webhooks-migrate'));
    expect(deleted).toBeGreaterThan(0);
    expect(calls.slice(deleted).some((c) => c.objects.some((o) => o.kind === 'Job'))).toBe(true);
    expect(calls.filter((c) => c.args.includes('undo')).map((c) => c.args.at(-1)).sort()).toEqual(['deployment/webhooks-api', 'deployment/webhooks-dispatcher', 'deployment/webhooks-recorder']);
  });

  describe('each check fails on a planted mistake', () => {
    const example = () => clone(rendered.get('deploy/kubernetes/overlays/example')!);

    it('schemas: a wrong type, a misspelt field of an operator\'s resource or of a Kubernetes kind', async () => {
      const objects = example();
      named(objects, 'Deployment', 'webhooks-api').spec.replicas = 'two';
      named(objects, 'RabbitmqCluster', 'webhooks-rabbitmq').spec.replica = 3;
      named(objects, 'Cluster', 'webhooks-postgres').spec.instances = '2';
      named(objects, 'ScaledObject', 'webhooks-dispatcher').spec.minReplicaCount = 'two';
      named(objects, 'PrometheusRule', 'nucleus-webhooks').spec.groups = 'none';
      expect(await schemaProblems(objects)).toHaveLength(5);
      const typo = example();
      podOf(typo, 'webhooks-api').containers[0].livenessProbe.httpGet.paht = '/healthz';
      named(typo, 'ScaledObject', 'webhooks-dispatcher').spec.minReplicas = 2;
      expect(unknownFieldProblems(typo)).toEqual([
        expect.stringMatching(/^Deployment\/webhooks-api: .*"paht".* does not exist in type 'IHTTPGetAction'/),
        expect.stringMatching(/^ScaledObject\/webhooks-dispatcher: .*"minReplicas".* does not exist/),
      ]);
    }, 180_000);

    it('probes: one missing, a startup probe shorter than the deadlines', () => {
      const objects = example();
      delete podOf(objects, 'webhooks-dispatcher').containers[0].livenessProbe;
      podOf(objects, 'webhooks-api').containers[0].startupProbe.failureThreshold = 10;
      podOf(objects, 'webhooks-recorder').containers[0].readinessProbe.httpGet.path = '/healthz';
      expect(probeProblems(objects)).toEqual([
        expect.stringContaining('webhooks-api/api: startup probe allows 50000 ms'),
        expect.stringContaining('webhooks-dispatcher/dispatcher: no livenessProbe'),
        expect.stringContaining('webhooks-recorder/recorder: readinessProbe on /healthz'),
      ]);
    });

    it('resources, security context, grace period, the Job\'s deadline and retries', () => {
      const objects = example();
      delete podOf(objects, 'webhooks-api').containers[0].resources.limits;
      podOf(objects, 'webhooks-recorder').containers[0].resources.limits.memory = '256Mi';
      podOf(objects, 'webhooks-recorder').containers[0].securityContext.readOnlyRootFilesystem = false;
      delete named(objects, 'Job', 'webhooks-migrate').spec.template.spec.automountServiceAccountToken;
      podOf(objects, 'webhooks-dispatcher').terminationGracePeriodSeconds = 30;
      expect(resourceProblems(objects)).toEqual([
        expect.stringContaining('webhooks-api/api: cpu'),
        expect.stringContaining('webhooks-api/api: memory'),
        expect.stringContaining('webhooks-recorder/recorder: memory limit 256 MiB, not above the 280 MiB'),
      ]);
      const job = named(objects, 'Job', 'webhooks-migrate').spec;
      job.activeDeadlineSeconds = 900;
      job.backoffLimit = 0;
      expect(jobProblems(objects)).toEqual([expect.stringContaining('Job/webhooks-migrate: activeDeadlineSeconds 900'), expect.stringContaining('Job/webhooks-migrate: backoffLimit 0')]);
      expect(securityProblems(objects)).toEqual([expect.stringContaining('webhooks-recorder/recorder: root filesystem'), expect.stringContaining('webhooks-migrate/migrate: the service account token')]);
      expect(graceProblems(objects)).toEqual([expect.stringContaining('webhooks-dispatcher/dispatcher: terminationGracePeriodSeconds 30')]);
    });

    it('durability: a Cluster that commits without a standby, or whose one standby down stops writes, or promotes any', () => {
      const objects = example();
      const spec = named(objects, 'Cluster', 'webhooks-postgres').spec;
      expect(durabilityProblems(objects)).toEqual([]);
      spec.instances = 2;
      expect(durabilityProblems(objects)).toEqual(['Cluster/webhooks-postgres: 2 instances for 1 synchronous: one standby down stops every write']);
      spec.instances = 3;
      delete spec.postgresql.synchronous.failoverQuorum;
      expect(durabilityProblems(objects)).toEqual([expect.stringContaining('no failoverQuorum')]);
      delete spec.postgresql.synchronous;
      expect(durabilityProblems(objects)).toEqual(['Cluster/webhooks-postgres: commits do not wait for a standby: a failover loses acked waits']);
    });

    it('disruption budgets: not-ready pods kept, none allowed at the autoscaler\'s floor, a selector of no Deployment; pods not spread', () => {
      const objects = example();
      delete named(objects, 'PodDisruptionBudget', 'webhooks-recorder').spec.unhealthyPodEvictionPolicy;
      const api = named(objects, 'PodDisruptionBudget', 'webhooks-api').spec;
      delete api.maxUnavailable;
      api.minAvailable = 2;
      named(objects, 'PodDisruptionBudget', 'webhooks-dispatcher').spec.selector.matchLabels['app.kubernetes.io/component'] = 'dispatchers';
      expect(budgetProblems(objects)).toEqual([
        'PodDisruptionBudget/webhooks-api: allows 0 of 2 replicas to go: a drain never evicts one',
        'PodDisruptionBudget/webhooks-dispatcher selects the pods of 0 Deployments, not 1',
        expect.stringContaining('PodDisruptionBudget/webhooks-recorder: unhealthyPodEvictionPolicy unset (IfHealthyBudget), not AlwaysAllow'),
      ]);
      delete podOf(objects, 'webhooks-api').topologySpreadConstraints;
      podOf(objects, 'webhooks-dispatcher').topologySpreadConstraints[0].labelSelector.matchLabels['app.kubernetes.io/component'] = 'api';
      expect(spreadProblems(objects)).toEqual([
        expect.stringContaining('Deployment/webhooks-api: its pods are not spread'),
        expect.stringContaining('Deployment/webhooks-dispatcher: its pods are not spread'),
      ]);
    });

    it('configuration: an undocumented key, a secret in the ConfigMap, a required variable missing, a recommended one unset, a Secret the guide does not make', () => {
      const objects = example();
      const config = objects.find((o) => o.kind === 'ConfigMap')! as unknown as { data: Record<string, string> };
      config.data.SHUTDOWN_TIMOUT = '30s';
      delete config.data.AUTH_JWT_AUDIENCE;
      config.data.DATABASE_URL = 'postgres://webhooks:secret@db/webhooks';
      const dispatcher = podOf(objects, 'webhooks-dispatcher').containers[0];
      dispatcher.env = dispatcher.env.filter((e: { name: string }) => e.name !== 'SECRETS_KEY');
      podOf(objects, 'webhooks-recorder').containers[0].env[0].valueFrom.secretKeyRef.key = 'RABBITMQ_URI';
      const api = podOf(objects, 'webhooks-api').containers[0];
      api.env = api.env.filter((e: { name: string }) => e.name !== 'SECRETS_KEY_PREVIOUS');
      expect(secretReferenceProblems(objects)).toEqual(expect.arrayContaining([expect.stringContaining('webhooks-api/api: SECRETS_KEY_PREVIOUS, which the program reads, is not referenced'), expect.stringContaining('webhooks-dispatcher/dispatcher: SECRETS_KEY,')]));
      const problems = configurationProblems(objects, documented, secrets);
      expect(problems).toEqual(expect.arrayContaining([
        expect.stringContaining('SHUTDOWN_TIMOUT is not a documented variable'),
        expect.stringContaining('DATABASE_URL is a secret, written in a manifest'),
        expect.stringMatching(/webhooks-dispatcher\/dispatcher: SECRETS_KEY: .*required/),
        expect.stringContaining('webhooks-recorder/recorder: RABBITMQ_URL from Secret webhooks-secrets key RABBITMQ_URI'),
        expect.stringMatching(/webhooks-api\/api: AUTH_JWT_AUDIENCE unset, which docs\/production.md recommends/),
      ]));
    });

    it('a fresh cluster: a command in a namespace not made yet, a Secret made twice', () => {
      const production = 'deploy/kubernetes/overlays/production';
      const code = blocks().filter(runFor(production)).map((b) => b.code);
      const namespace = code.findIndex((c) => c.includes('-l kubernetes.io/metadata.name=webhooks'));
      const withoutNamespace = code.map((c, i) => (i === namespace ? c.replace(/^kubectl apply .*-l kubernetes\.io\/metadata\.name=webhooks\n/m, '') : c));
      expect(() => runGuide(renderings, production, withoutNamespace)).toThrow(/namespaces "webhooks" not found/);
      const secret = code.find((c) => c.includes('create secret'))!;
      expect(() => runGuide(renderings, production, [...code, secret])).toThrow(/secrets "webhooks-secrets" already exists/);
    }, 60_000);

    it('migration order: the wait for the Job left out', () => {
      expect(migrateOrderProblems(calls.filter((c) => !waitsForMigrate(c)))).toEqual(expect.arrayContaining([expect.stringContaining('without the migrate Job completed before')]));
    });

    it('a Secret with a value, a PrometheusRule that drifted from docker/alerts.yml, a private range let out, a program not scraped', () => {
      const objects = example();
      objects.push({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'oops' }, stringData: { SECRETS_KEY: 'x' } });
      named(objects, 'PrometheusRule', 'nucleus-webhooks').spec.groups[0].rules[0].for = '10m';
      named(objects, 'NetworkPolicy', 'webhooks-dispatcher').spec.egress[0].to[0].ipBlock.except.shift();
      expect(secretValueProblems(objects)).toEqual(['Secret/oops holds values in a manifest']);
      expect(ruleProblems(objects, ALERTS)).toEqual([expect.stringContaining('differs from docker/alerts.yml')]);
      expect(networkProblems(objects)).toEqual(['egress to 0.0.0.0/0 lets the dispatcher reach 10.0.0.0/8']);
      // A private address of its own, on every port (a peer outside the cluster is let in on its ports only).
      named(objects, 'NetworkPolicy', 'webhooks-dispatcher').spec.egress.push({ to: [{ ipBlock: { cidr: '10.1.2.3/32' } }] });
      expect(networkProblems(objects)).toEqual(['egress to 0.0.0.0/0 lets the dispatcher reach 10.0.0.0/8', 'egress to 10.1.2.3/32, inside 10.0.0.0/8, on every port']);
      const scrape = named(objects, 'ServiceMonitor', 'nucleus-webhooks').spec.endpoints[0];
      delete scrape.relabelings;
      expect(scrapeLabelProblems(objects, LABELS)).toEqual(['ServiceMonitor/nucleus-webhooks port metrics: the series\' label endpoint is also the target\'s, so it would be stored as exported_endpoint']);
      expect(scrapeLabelProblems(objects, new Set([...LABELS, 'pod']))).toHaveLength(2);
      scrape.honorLabels = true;
      expect(scrapeLabelProblems(objects, LABELS)).toEqual([]);
      named(objects, 'Service', 'webhooks-recorder-metrics').spec.ports[0].name = 'prom';
      expect(scrapeProblems(objects, ALERTS)).toEqual(['ServiceMonitor/nucleus-webhooks scrapes the jobs api, dispatcher; the rules expect api, dispatcher, recorder']);
    });
  });
});
