#!/usr/bin/env node
/**
 * A stand-in for kubectl where no cluster is (the tests), for test/unit/kubernetes-manifests.test.ts
 * (behind test/support/fake-kubectl.sh, which records the calls that only need recording),
 * which runs docs/production.md's Kubernetes commands with it. Each call is appended to
 * FAKE_KUBECTL_LOG as one JSON line: its arguments, and the objects it would have sent.
 * - `apply -k DIR [-l SELECTOR]`: DIR rendered by the real kubectl (FAKE_KUBECTL_REAL) with
 *   `kustomize`, then filtered by the selector (`k=v`, `k==v`, `k!=v`, comma-separated), as
 *   `kubectl apply -l` does; a selector that picks nothing fails, as a typo should. With
 *   FAKE_KUBECTL_RENDERED (a directory), DIR's rendering is read from there when the test put it
 *   there (the same `kubectl kustomize DIR`, run once for every call of the guide that applies DIR).
 * - `create secret …`: the real kubectl with `--dry-run=client -o json`: the Secret as it would be.
 * - `get secret NAME -o jsonpath={.data.KEY}`: a placeholder, base64 as the API server answers:
 *   `uri` a PostgreSQL URL (CloudNativePG's app Secret), anything else `placeholder-KEY`.
 * - anything else (`apply -f URL`, `wait`, `rollout`, `delete`): recorded, exit 0.
 * With FAKE_KUBECTL_STATE (a directory), what a cluster would refuse fails: an object applied into a
 * namespace that does not exist (its `namespaces` file, one a line, grows with each Namespace
 * applied; fake-kubectl.sh refuses `-n` of one not there), a Secret created twice (`secrets`).
 */
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const real = process.env.FAKE_KUBECTL_REAL ?? 'kubectl';
const args = process.argv.slice(2);
const record = (objects) => appendFileSync(process.env.FAKE_KUBECTL_LOG, `${JSON.stringify({ args, objects })}\n`);

function fail(message) {
  process.stderr.write(`kubectl (test stand-in): ${message}\n`);
  process.exit(1);
}

/** The value of an option given as `-x value`, `--long value` or `--long=value`. */
function option(short, long) {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === short || args[i] === long) return args[i + 1];
    if (args[i].startsWith(`${long}=`)) return args[i].slice(long.length + 1);
  }
  return undefined;
}

function matches(labels, selector) {
  return selector.split(',').every((term) => {
    const m = /^\s*([^!=\s]+)\s*(==|=|!=)\s*(\S*)\s*$/.exec(term);
    if (!m) fail(`selector ${selector}: only k=v, k==v and k!=v`);
    const [, key, op, value] = m;
    return op === '!=' ? labels?.[key] !== value : labels?.[key] === value;
  });
}

const verb = args.find((a) => !a.startsWith('-') && args[args.indexOf(a) - 1] !== '-n');
const rest = args.slice(args.indexOf(verb) + 1).filter((a) => !a.startsWith('-'));

const state = process.env.FAKE_KUBECTL_STATE;
/** The lines of a state file (`namespaces`, `secrets`), and a line added; nothing without FAKE_KUBECTL_STATE. */
const stateLines = (file) => (state && existsSync(join(state, file)) ? readFileSync(join(state, file), 'utf8').split('\n').filter(Boolean) : []);
const addState = (file, line) => state && appendFileSync(join(state, file), `${line}\n`);

/** Where the test left DIR's rendering (test/support/kubernetes.ts: renderedFile), if it did. */
function renderedBefore(dir) {
  const file = process.env.FAKE_KUBECTL_RENDERED && join(process.env.FAKE_KUBECTL_RENDERED, `${encodeURIComponent(resolve(dir))}.yaml`);
  return file && existsSync(file) ? readFileSync(file, 'utf8') : undefined;
}

if (verb === 'apply' && option('-k', '--kustomize')) {
  const dir = option('-k', '--kustomize');
  const rendered = renderedBefore(dir) ?? execFileSync(real, ['kustomize', dir], { encoding: 'utf8' });
  const selector = option('-l', '--selector');
  // Loaded here only: most calls (wait, rollout, get) need no YAML, and each call is a node start.
  const { parseAllDocuments } = await import('yaml');
  const objects = parseAllDocuments(rendered)
    .map((doc) => doc.toJS())
    .filter((o) => o && (selector === undefined || matches(o.metadata?.labels, selector)));
  if (objects.length === 0) fail(`no objects passed to apply (selector ${selector})`);
  record(objects);
  // In order, as kubectl applies them (kustomize puts a Namespace first).
  const missing = new Set();
  for (const o of objects) {
    if (o.kind === 'Namespace') addState('namespaces', o.metadata.name);
    else if (state && o.metadata?.namespace && !stateLines('namespaces').includes(o.metadata.namespace)) missing.add(o.metadata.namespace);
  }
  if (missing.size > 0) fail(`Error from server (NotFound): namespaces "${[...missing].join('", "')}" not found`);
} else if (verb === 'create' && rest[0] === 'secret') {
  const json = execFileSync(real, [...args, '--dry-run=client', '-o', 'json'], { encoding: 'utf8' });
  const secret = JSON.parse(json);
  if (option('-n', '--namespace')) secret.metadata.namespace = option('-n', '--namespace');
  const key = `${secret.metadata.namespace ?? 'default'}/${secret.metadata.name}`;
  if (stateLines('secrets').includes(key)) fail(`error: failed to create secret secrets "${secret.metadata.name}" already exists`);
  addState('secrets', key);
  record([secret]);
} else if (verb === 'get' && rest[0] === 'secret') {
  const key = /\{\.data\.([^}]+)\}/.exec(option('-o', '--output') ?? '')?.[1];
  if (!key) fail('get secret: only -o jsonpath={.data.KEY}');
  const value = key === 'uri' ? `postgresql://webhooks:placeholder@${rest[1].replace(/-app$/, '')}-rw.webhooks:5432/webhooks` : `placeholder-${key}`;
  record([]);
  process.stdout.write(Buffer.from(value).toString('base64'));
} else {
  record([]);
}
