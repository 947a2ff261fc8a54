import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { openApiDocument } from '../../apps/api/openapi.js';
import { SESSION_COOKIE } from '../../apps/api/portal/handlers.js';
import { CHANGES_CHANNEL } from '../../libs/merchants/rows.js';
import { Registry } from 'prom-client';
import { deliveryMetrics } from '../../libs/metrics/index.js';
import { METRIC_NAMES } from '../../libs/metrics/names.js';
import { documents, lineOf } from '../support/docs.js';

/**
 * Every Prometheus series and every HTTP route the docs name exists in the code: a renamed
 * metric or a moved route fails here, not in an operator's alert or a merchant's integration.
 */

function sourceFiles(root: string): string[] {
  return readdirSync(root, { recursive: true }).map(String).filter((f) => f.endsWith('.ts')).map((f) => join(root, f));
}

/**
 * The series the programs register: METRIC_NAMES (libs/metrics/names.ts, through which every
 * Counter, Gauge and Histogram is named) whose name some program uses. A histogram's series carry
 * its _bucket, _sum and _count suffixes.
 */
function registeredMetrics(): Set<string> {
  const sources = [...sourceFiles('apps'), ...sourceFiles('libs')].filter((f) => !f.endsWith(join('metrics', 'names.ts'))).map((f) => readFileSync(f, 'utf8')).join('\n');
  return new Set(Object.entries(METRIC_NAMES).filter(([key]) => sources.includes(`METRIC_NAMES.${key}`)).map(([, name]) => name));
}

const PROGRAM_NAMES: Record<string, string> = { api: 'API', dispatcher: 'dispatcher', recorder: 'recorder' };

/**
 * What each series is, read from the sources: the programs whose apps/<program>/ names it, or calls
 * the libs/metrics function that does (deliveryMetrics, operationalMetrics), and its label names
 * (a `labelNames: [...]`, or the label argument of labelledGaugeFrom and zeroedCounter).
 */
function seriesFacts(): Map<string, { programs: Set<string>; labels: Set<string> }> {
  const facts = new Map<string, { programs: Set<string>; labels: Set<string> }>();
  const names = METRIC_NAMES as Record<string, string>;
  const fact = (key: string) => {
    const name = names[key]!;
    if (!facts.has(name)) facts.set(name, { programs: new Set(), labels: new Set() });
    return facts.get(name)!;
  };
  const library = readFileSync(join('libs', 'metrics', 'index.ts'), 'utf8');
  const functions = [...library.matchAll(/^export function (\w+)\(([\s\S]*?)(?=^export |(?![\s\S]))/gm)].map((m) => ({ name: m[1]!, keys: [...m[2]!.matchAll(/METRIC_NAMES\.(\w+)/g)].map((k) => k[1]!) }));
  for (const [dir, program] of Object.entries(PROGRAM_NAMES)) {
    const source = sourceFiles(join('apps', dir)).map((f) => readFileSync(f, 'utf8')).join('\n');
    for (const [, key] of source.matchAll(/METRIC_NAMES\.(\w+)/g)) fact(key!).programs.add(program);
    for (const fn of functions) if (new RegExp(`\\b${fn.name}\\(`).test(source)) for (const key of fn.keys) fact(key).programs.add(program);
  }
  for (const file of [...sourceFiles('apps'), ...sourceFiles('libs')]) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/name: METRIC_NAMES\.(\w+),[^}]*?labelNames: \[([^\]]*)\]/g)) for (const l of m[2]!.matchAll(/'(\w+)'/g)) fact(m[1]!).labels.add(l[1]!);
    for (const m of text.matchAll(/(?:labelledGaugeFrom|zeroedCounter)\(\s*[\w.]+,\s*METRIC_NAMES\.(\w+),\s*'(?:[^'\\]|\\.)*',\s*'(\w+)'/g)) fact(m[1]!).labels.add(m[2]!);
  }
  return facts;
}

/** operating.md's table of series: each `webhooks_x{a,b}` of a row's first cell, with the row's programs. */
function operatingSeries(): Map<string, { programs: Set<string>; labels: Set<string> }> {
  const section = readFileSync('docs/operating.md', 'utf8').split('\n## Metrics and health\n')[1]!.split('\n## ')[0]!;
  const table = new Map<string, { programs: Set<string>; labels: Set<string> }>();
  for (const row of section.split('\n').filter((line) => line.startsWith('| `webhooks_'))) {
    const [series, programs] = row.split('|').slice(1).map((cell) => cell.trim());
    for (const m of series!.matchAll(/`(webhooks_[a-z_]+)(?:\{([^}]*)\})?`/g)) {
      table.set(m[1]!, { programs: new Set(programs!.split(',').map((p) => p.trim())), labels: new Set(m[2]?.split(',').map((l) => l.trim()) ?? []) });
    }
  }
  return table;
}

/** `webhooks_` words that are not series: the portal's session cookie and the merchants' change channel. */
const NOT_METRICS = new Set([SESSION_COOKIE, CHANGES_CHANNEL]);

/** The files besides the docs that name series an operator sees: the compose Prometheus, its alert rules and the dashboard. */
function dockerFiles(): Array<{ file: string; text: string }> {
  return readdirSync('docker', { recursive: true })
    .map(String)
    .filter((f) => /\.(ya?ml|json)$/.test(f))
    .map((f) => ({ file: join('docker', f), text: readFileSync(join('docker', f), 'utf8') }));
}

/** The API's routes as `METHOD /template`: the OpenAPI document's, and the few it leaves out (the reference page, the portal's assets). */
function apiRoutes(): Array<{ method: string; path: string }> {
  const routes: Array<{ method: string; path: string }> = [];
  for (const [path, operations] of Object.entries(openApiDocument.paths as Record<string, Record<string, unknown>>)) {
    for (const method of Object.keys(operations)) if (/^(get|post|put|patch|delete)$/.test(method)) routes.push({ method: method.toUpperCase(), path });
  }
  for (const file of [...sourceFiles('apps/api'), ...sourceFiles('libs/metrics')]) {
    for (const m of readFileSync(file, 'utf8').matchAll(/\.(get|post|put|patch|delete)\(\s*['`](\/[^'`]*)['`]/g)) {
      routes.push({ method: m[1]!.toUpperCase(), path: m[2]!.replace(/\$\{[^}]*\}/g, '{x}') });
    }
  }
  return routes;
}

/** A route template as a pattern: `{merchantId}` stands for one path segment. */
function templatePattern(path: string): RegExp {
  return new RegExp(`^${path.split(/\{[^}]+\}/).map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&')).join('[^/]+')}$`);
}

const API_PATH = String.raw`\/(?:nucleus|admin|portal|healthz|readyz|metrics|openapi\.json|docs)\b[^\s\`'"?#)]*`;

describe('what the docs name', () => {
  const docs = documents();

  it('every webhooks_* series in README, docs/ and docker/ is one the programs register', () => {
    const registered = registeredMetrics();
    expect(registered.size).toBeGreaterThan(15);
    const unknown: string[] = [];
    for (const { file, text } of [...docs, ...dockerFiles()]) {
      for (const m of text.matchAll(/\bwebhooks_[a-z_]+[a-z]/g)) {
        const name = m[0].replace(/_(bucket|sum|count)$/, '');
        if (!registered.has(name) && !registered.has(m[0]) && !NOT_METRICS.has(m[0])) unknown.push(`${file}:${lineOf(text, m.index)}: ${m[0]}`);
      }
    }
    expect(unknown).toEqual([]);
  });

  it('operating.md\'s table of series lists every series the programs register, with the programs that do and its labels', () => {
    const facts = seriesFacts();
    const table = operatingSeries();
    expect(facts.size).toBeGreaterThan(25);
    const sorted = (set: Set<string>) => [...set].sort();
    const wrong = [...facts].filter(([, f]) => f.programs.size > 0).flatMap(([name, f]) => {
      const row = table.get(name);
      if (!row) return [`${name}: not in the table`];
      const problems: string[] = [];
      if (sorted(row.programs).join() !== sorted(f.programs).join()) problems.push(`${name}: the table says ${sorted(row.programs).join(', ')}, registered by ${sorted(f.programs).join(', ')}`);
      if (sorted(row.labels).join() !== sorted(f.labels).join()) problems.push(`${name}: the table gives labels {${sorted(row.labels).join()}}, the code {${sorted(f.labels).join()}}`);
      return problems;
    });
    expect(wrong).toEqual([]);
  });

  it('operating.md names every outcome webhooks_deliveries_total counts (the series the dispatcher zeroes at start)', async () => {
    const registry = new Registry();
    deliveryMetrics(registry);
    const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === METRIC_NAMES.deliveries)!;
    const outcomes = new Set(metric.values.map((v) => String(v.labels.outcome)));
    expect(outcomes.size).toBeGreaterThan(5);
    const row = readFileSync('docs/operating.md', 'utf8').split('\n').find((line) => line.startsWith(`| \`${METRIC_NAMES.deliveries}{`))!;
    expect([...outcomes].filter((outcome) => !row.includes(`\`${outcome}\``))).toEqual([]);
  });

  it('every route in README and docs/, with its method when given, is one the API serves', () => {
    const routes = apiRoutes().map((route) => ({ ...route, pattern: templatePattern(route.path) }));
    expect(routes.length).toBeGreaterThan(20);
    const found: string[] = [];
    const unknown: string[] = [];
    const check = (file: string, text: string, index: number, method: string | undefined, written: string) => {
      // `{id}`, `:id`, `<id>` or a value: one segment; `/admin/...` and `/portal/api/`: a prefix of routes.
      const path = written.replace(/(\.\.\.|…)$/, '').replace(/──▶$/, '');
      const candidates = routes.filter((route) => method === undefined || route.method === method);
      const exact = candidates.some((route) => route.pattern.test(path.replace(/<[^>]+>|:[a-z][A-Za-z]*(?=\/|$)/g, 'x')));
      const prefix = method === undefined && candidates.some((route) => route.path.startsWith(path.endsWith('/') ? path : `${path}/`));
      found.push(written);
      if (!exact && !prefix) unknown.push(`${file}:${lineOf(text, index)}: ${method ? `${method} ` : ''}${written}`);
    };
    for (const { file, text } of docs) {
      // With a method, anywhere (prose, tables, code blocks).
      for (const m of text.matchAll(new RegExp(String.raw`\b(GET|POST|PUT|PATCH|DELETE) (${API_PATH})`, 'g'))) check(file, text, m.index, m[1], m[2]!);
      // Without one, in code spans: `/readyz`, `{base_url}/nucleus/tnx/webhook?reference=...`.
      for (const span of text.matchAll(/`([^`\n]+)`/g)) {
        if (/^(GET|POST|PUT|PATCH|DELETE) /.test(span[1]!)) continue;
        for (const m of span[1]!.matchAll(new RegExp(String.raw`(?:^|[\s}])(${API_PATH})`, 'g'))) check(file, text, span.index, undefined, m[1]!);
      }
    }
    expect(found.length).toBeGreaterThan(40);
    expect(unknown).toEqual([]);
  });
});
