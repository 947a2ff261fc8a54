import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { openApiDocument } from '../../apps/api/openapi.js';
import { SESSION_COOKIE } from '../../apps/api/portal/handlers.js';
import { CHANGES_CHANNEL } from '../../libs/merchants/rows.js';
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
