/**
 * The alert rules in docker/alerts.yml: valid for promtool, proven by promtool's unit tests to fire
 * when they should and not when they should not, built only on series the programs register, loaded
 * by the compose Prometheus, and each one explained in docs/operating.md with what to do.
 *
 * promtool comes with the Debian `prometheus` package (.ci/run installs it); without it these
 * tests fail rather than skip, so that CI never passes without having checked the rules.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { METRIC_NAMES } from '../../libs/metrics/names.js';
import { metricNamesIn } from '../support/promql.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const RULES = 'docker/alerts.yml';
const UNIT_TESTS = 'test/unit/alerts.promtool.yml';
const read = (path: string) => readFileSync(join(REPO, path), 'utf8');

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const rules = (parse(read(RULES)) as { groups: Array<{ rules: Rule[] }> }).groups.flatMap((g) => g.rules);
const alertNames = rules.map((r) => r.alert);

function promtool(...args: string[]): { status: number | null; output: string } {
  const bin = process.env.PROMTOOL ?? 'promtool';
  const run = spawnSync(bin, args, { cwd: REPO, encoding: 'utf8', timeout: 60_000 });
  if (run.error) throw new Error(`${bin} could not run (${run.error.message}): install the Debian package prometheus, or set PROMTOOL`);
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

/**
 * The series the programs register: every METRIC_NAMES entry that code outside names.ts uses, the
 * histograms with their _bucket/_sum/_count, and Prometheus's own `up`. A name listed in names.ts
 * that nothing registers does not count.
 */
function registeredNames(): Set<string> {
  const byKey = METRIC_NAMES as Record<string, string>;
  const names = new Set<string>(['up']);
  const files = ['apps', 'libs'].flatMap((dir) =>
    (readdirSync(join(REPO, dir), { recursive: true }) as string[]).filter((f) => f.endsWith('.ts')).map((f) => join(dir, f)),
  );
  for (const file of files) {
    if (file === join('libs', 'metrics', 'names.ts')) continue;
    // Comments do not register anything: a name mentioned only in one does not count.
    const source = read(file).replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|\s)\/\/.*$/gm, '');
    for (const [, key] of source.matchAll(/METRIC_NAMES\.(\w+)/g)) {
      const name = byKey[key!];
      if (!name) continue;
      const histogram = new RegExp(`new Histogram\\(\\{\\s*name:\\s*METRIC_NAMES\\.${key}\\b`).test(source);
      for (const suffix of histogram ? ['_bucket', '_sum', '_count'] : ['']) names.add(name + suffix);
    }
  }
  return names;
}

/** The "## Alerts" section of operating.md, one entry per `- **Name**` list item. */
function operatingAlerts(): Map<string, string> {
  const doc = read('docs/operating.md');
  const section = /^## Alerts\n([\s\S]*?)(?=^## )/m.exec(doc)?.[1] ?? '';
  const entries = new Map<string, string>();
  for (const item of section.split(/^- /m).slice(1)) {
    const name = /^\*\*(\w+)\*\*/.exec(item)?.[1];
    if (name) entries.set(name, item.replace(/\s+/g, ' '));
  }
  return entries;
}

describe('docker/alerts.yml', () => {
  it('passes promtool check rules', () => {
    const { status, output } = promtool('check', 'rules', RULES);
    expect({ status, output }).toEqual({ status: 0, output: expect.stringContaining(`SUCCESS: ${rules.length} rules found`) });
  });

  it('passes its promtool unit tests', () => {
    const { status, output } = promtool('test', 'rules', UNIT_TESTS);
    expect({ status, output }).toEqual({ status: 0, output: expect.stringContaining('SUCCESS') });
  });

  it('has, for every alert, a unit test where it fires and one where it must not', () => {
    const unit = parse(read(UNIT_TESTS)) as {
      rule_files: string[];
      tests: Array<{ alert_rule_test?: Array<{ alertname: string; exp_alerts: unknown[] }> }>;
    };
    expect(unit.rule_files.map((f) => posix.normalize(posix.join(dirname(UNIT_TESTS), f)))).toEqual([RULES]);
    const cases = unit.tests.flatMap((t) => t.alert_rule_test ?? []);
    const fires = new Set(cases.filter((c) => c.exp_alerts.length > 0).map((c) => c.alertname));
    const quiet = new Set(cases.filter((c) => c.exp_alerts.length === 0).map((c) => c.alertname));
    expect(alertNames.filter((name) => !fires.has(name) || !quiet.has(name))).toEqual([]);
    expect(cases.map((c) => c.alertname).filter((name) => !alertNames.includes(name))).toEqual([]);
  });

  it('names each alert once, with a severity of critical or warning and a summary', () => {
    expect(new Set(alertNames).size).toBe(alertNames.length);
    for (const rule of rules) {
      expect({ alert: rule.alert, severity: rule.labels?.severity, summary: typeof rule.annotations?.summary }).toEqual({
        alert: rule.alert,
        severity: expect.stringMatching(/^(critical|warning)$/),
        summary: 'string',
      });
    }
  });

  it('uses only series the programs register (and Prometheus\'s up)', () => {
    const registered = registeredNames();
    expect(registered).toContain(METRIC_NAMES.deliveryLogLeading);
    const used = rules.flatMap((r) => metricNamesIn(r.expr).map((name) => ({ alert: r.alert, name })));
    expect(used.length).toBeGreaterThan(rules.length);
    expect(used.filter(({ name }) => !registered.has(name))).toEqual([]);
  });

  it('names only the jobs docker/prometheus.yml scrapes', () => {
    const prometheus = parse(read('docker/prometheus.yml')) as { scrape_configs: Array<{ job_name: string }> };
    const jobs = new Set(prometheus.scrape_configs.map((c) => c.job_name));
    const named = rules.flatMap((r) => [...r.expr.matchAll(/\bjob=~?"([^"]*)"/g)].flatMap((m) => m[1]!.split('|')));
    expect(named.length).toBeGreaterThan(0);
    expect(named.filter((job) => !jobs.has(job))).toEqual([]);
  });

  it('is loaded by the compose Prometheus: rule_files names it beside prometheus.yml, where compose mounts it', () => {
    const prometheus = parse(read('docker/prometheus.yml')) as { rule_files?: string[] };
    const compose = parse(read('docker/compose.yaml')) as { services: Record<string, { volumes?: string[] }> };
    const mounts = (compose.services.prometheus?.volumes ?? []).map((v) => v.split(':'));
    const target = (source: string) => mounts.find(([from]) => posix.normalize(posix.join('docker', from!)) === source)?.[1];
    const config = target('docker/prometheus.yml');
    expect(config).toBe('/etc/prometheus/prometheus.yml');
    expect((prometheus.rule_files ?? []).map((f) => posix.resolve(posix.dirname(config!), f))).toEqual([target(RULES)]);
    const { status, output } = promtool('check', 'config', 'docker/prometheus.yml');
    expect({ status, output }).toEqual({ status: 0, output: expect.stringContaining(`SUCCESS: ${rules.length} rules found`) });
  });
});

describe('docs/operating.md#alerts', () => {
  const documented = operatingAlerts();

  it('explains every alert, with what it means and what to do', () => {
    expect(alertNames.filter((name) => !documented.has(name))).toEqual([]);
    for (const name of alertNames) {
      const entry = documented.get(name) ?? '';
      expect({ name, whatToDo: /\*What to do\*:\s*\S/.test(entry), meaning: entry.split('*What to do*')[0]!.length > name.length + 40 }).toEqual({ name, whatToDo: true, meaning: true });
    }
  });

  it('names no alert the rules do not have, and gives each one\'s severity as the rules do', () => {
    expect([...documented.keys()].filter((name) => !alertNames.includes(name))).toEqual([]);
    for (const rule of rules) {
      expect({ alert: rule.alert, severity: new RegExp(`^\\*\\*${rule.alert}\\*\\* \\(${rule.labels?.severity}\\b`).test(documented.get(rule.alert) ?? '') }).toEqual({ alert: rule.alert, severity: true });
    }
  });
});
