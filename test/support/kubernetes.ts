/**
 * What test/unit/kubernetes-manifests.test.ts reads: deploy/kubernetes rendered by `kubectl
 * kustomize`, each object validated offline against the schemas of a pinned version, and the
 * documented variables. The Kubernetes kinds: the `kubernetes-models` 4.5.1 package (Kubernetes
 * 1.33.0's OpenAPI schemas; its 5.x needs Node 22); KEDA's and the Prometheus Operator's kinds:
 * their `@kubernetes-models` packages; the RabbitMQ Cluster Operator's and CloudNativePG's: the
 * CRDs of their releases, vendored in test/fixtures/kubernetes. Fields a kind lacks:
 * test/support/kubernetes-types.ts.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv, type ValidateFunction } from 'ajv';
import { parseAllDocuments } from 'yaml';

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

/** `kubectl kustomize DIR` (DIR relative to the repository): what it prints. */
export function renderText(dir: string): string {
  if (!existsSync(KUBECTL)) throw new Error('kubectl not found on PATH: it renders the manifests (kustomize is inside it); install it, or set KUBECTL to its path');
  return execFileSync(KUBECTL, ['kustomize', join(REPO, dir)], { encoding: 'utf8', timeout: 60_000 });
}

/** The objects of a rendering, in its order. */
export function parseRendered(text: string): K8sObject[] {
  return parseAllDocuments(text).map((doc) => doc.toJS() as K8sObject).filter(Boolean);
}

/** Where test/support/fake-kubectl.mjs looks for DIR's rendering in FAKE_KUBECTL_RENDERED (`folder`). */
export function renderedFile(folder: string, dir: string): string {
  return join(folder, `${encodeURIComponent(join(REPO, dir).replace(/\/$/, ''))}.yaml`);
}

type Model = new (data: never) => { validate(): void };

/**
 * Where each apiVersion's models are: a kind's class is `<kind>` in `<module>/<kind>` (its own
 * module: a group's index loads every model of the group, seconds more), its interface `I<kind>`.
 * An apiVersion not here, and not a vendored CRD's, has no schema, and fails.
 */
export const MODULES: Record<string, string> = {
  v1: 'kubernetes-models/v1',
  'apps/v1': 'kubernetes-models/apps/v1',
  'batch/v1': 'kubernetes-models/batch/v1',
  'policy/v1': 'kubernetes-models/policy/v1',
  'autoscaling/v2': 'kubernetes-models/autoscaling/v2',
  'networking.k8s.io/v1': 'kubernetes-models/networking.k8s.io/v1',
  'keda.sh/v1alpha1': '@kubernetes-models/keda/keda.sh/v1alpha1',
  'monitoring.coreos.com/v1': '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1',
};

const models = new Map<string, Model | undefined>();

/** The model class of a kind, loaded once (one at a time: Jest's module linker dislikes two at once of a shared graph). */
async function model(apiVersion: string, kind: string): Promise<Model | undefined> {
  const module = MODULES[apiVersion];
  if (!module || !/^[A-Za-z]+$/.test(kind)) return undefined;
  const specifier = `${module}/${kind}`;
  if (!models.has(specifier)) {
    const loaded = (await import(specifier).catch((err: { code?: string }) => {
      if (err.code === 'ERR_MODULE_NOT_FOUND' || /Cannot find module/.test(String(err))) return {};
      throw err;
    })) as Record<string, Model>;
    models.set(specifier, loaded[kind]);
  }
  return models.get(specifier);
}

/** What is wrong with the objects against their kinds' schemas, in order; the objects taken one at a time. */
export async function schemaProblems(objects: K8sObject[]): Promise<string[]> {
  const problems: string[] = [];
  for (const object of objects) {
    const problem = await schemaProblem(object);
    if (problem) problems.push(problem);
  }
  return problems;
}

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
async function schemaProblem(object: K8sObject): Promise<string | undefined> {
  const where = `${object.kind}/${object.metadata?.name}`;
  const Kind = await model(object.apiVersion, object.kind);
  if (Kind) {
    try {
      new Kind(object as never).validate();
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
