/**
 * What test/unit/kubernetes-manifests.test.ts reads: deploy/kubernetes rendered by `kubectl
 * kustomize`, each object validated offline against the schemas of a pinned version, and the
 * documented variables. The Kubernetes kinds: the `kubernetes-models` 4.5.1 package (Kubernetes
 * 1.33.0's OpenAPI schemas; its 5.x needs Node 22); KEDA's and the Prometheus Operator's kinds:
 * their `@kubernetes-models` packages; the RabbitMQ Cluster Operator's and CloudNativePG's: the
 * CRDs of their releases, vendored in test/fixtures/kubernetes.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv, type ValidateFunction } from 'ajv';
import { parseAllDocuments } from 'yaml';
// Each kind from its own module: a group's index loads every model of the group, some seconds more.
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject';
import { TriggerAuthentication } from '@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication';
import { PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { Job } from 'kubernetes-models/batch/v1/Job';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
/** kubectl's path (KUBECTL, else the first on PATH): absolute, since the guide's run puts a stand-in first on PATH. */
export const KUBECTL = process.env.KUBECTL ?? (process.env.PATH ?? '').split(':').map((dir) => join(dir, 'kubectl')).find((file) => existsSync(file)) ?? 'kubectl';
const FIXTURES = join(REPO, 'test/fixtures/kubernetes');

/** A rendered object, as kustomize prints it. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

/** `kubectl kustomize DIR`: the objects it renders, in its order. */
export function render(dir: string): K8sObject[] {
  if (!existsSync(KUBECTL)) throw new Error('kubectl not found on PATH: it renders the manifests (kustomize is inside it); install it, or set KUBECTL to its path');
  const text = execFileSync(KUBECTL, ['kustomize', join(REPO, dir)], { encoding: 'utf8', timeout: 60_000 });
  return parseAllDocuments(text).map((doc) => doc.toJS() as K8sObject).filter(Boolean);
}

type Model = new (data: never) => { validate(): void };
/** The kinds the manifests use, by apiVersion: a kind not here has no schema, and fails. */
const MODELS: Record<string, Record<string, Model>> = {
  v1: { ConfigMap, Namespace, Secret, Service },
  'apps/v1': { Deployment },
  'batch/v1': { Job },
  'policy/v1': { PodDisruptionBudget },
  'autoscaling/v2': { HorizontalPodAutoscaler },
  'networking.k8s.io/v1': { NetworkPolicy },
  'keda.sh/v1alpha1': { ScaledObject, TriggerAuthentication },
  'monitoring.coreos.com/v1': { PrometheusRule, ServiceMonitor },
};

/** The CRDs vendored in the fixtures, by group. */
const CRDS: Record<string, string> = {
  'rabbitmq.com': 'rabbitmq.com_rabbitmqclusters.yaml',
  'postgresql.cnpg.io': 'postgresql.cnpg.io_clusters.yaml',
};

/**
 * The API server refuses fields a CRD's structural schema does not name (kubectl's field
 * validation is Strict), but JSON Schema allows them: every object schema with properties and no
 * word of its own on other fields is closed here, so a misspelt field fails as it would there.
 */
function closed(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closed);
  if (schema === null || typeof schema !== 'object') return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) out[key] = key === 'properties' ? Object.fromEntries(Object.entries(value as object).map(([k, v]) => [k, closed(v)])) : closed(value);
  if (out.properties && out.additionalProperties === undefined && !out['x-kubernetes-preserve-unknown-fields']) out.additionalProperties = false;
  return out;
}

const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
const crdValidators = new Map<string, ValidateFunction>();

function crdValidator(apiVersion: string, kind: string): ValidateFunction | undefined {
  const [group, version] = apiVersion.split('/') as [string, string];
  const file = CRDS[group];
  if (!file) return undefined;
  const key = `${apiVersion}/${kind}`;
  if (!crdValidators.has(key)) {
    const crd = parseAllDocuments(readFileSync(join(FIXTURES, file), 'utf8')).map((d) => d.toJS()).find((d) => d?.kind === 'CustomResourceDefinition');
    if (crd?.spec.names.kind !== kind) return undefined;
    const served = (crd.spec.versions as Array<{ name: string; schema: { openAPIV3Schema: object } }>).find((v) => v.name === version);
    if (!served) return undefined;
    crdValidators.set(key, ajv.compile(closed(served.schema.openAPIV3Schema) as object));
  }
  return crdValidators.get(key);
}

/** What is wrong with an object against its kind's schema, or 'no schema' when none is known. */
export function schemaProblem(object: K8sObject): string | undefined {
  const where = `${object.kind}/${object.metadata?.name}`;
  const model = MODELS[object.apiVersion]?.[object.kind];
  if (model) {
    try {
      new model(object as never).validate();
      return undefined;
    } catch (err) {
      return `${where}: ${(err as Error).message}`;
    }
  }
  const validate = crdValidator(object.apiVersion, object.kind);
  if (!validate) return `${where}: no schema for ${object.apiVersion} ${object.kind}`;
  if (validate(object)) return undefined;
  return `${where}: ${ajv.errorsText(validate.errors)}`;
}

/** The variables docs/configuration.md documents: every backticked name in its table's first column. */
export function documentedVariables(): Set<string> {
  const text = readFileSync(join(REPO, 'docs/configuration.md'), 'utf8');
  const names = new Set<string>();
  for (const line of text.split('\n')) {
    const first = /^\|([^|]+)\|/.exec(line)?.[1];
    for (const m of first?.matchAll(/`([A-Z][A-Z0-9_]*)`/g) ?? []) names.add(m[1]!);
  }
  return names;
}
