/**
 * The import graph's rules (.dependency-cruiser.cjs), checked by dependency-cruiser: no import
 * cycle in apps/ or libs/, and no lib importing an app. The second test plants both in a scratch
 * tree, so that a resolver that stopped finding imports (and so found no cycle) fails here too.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(REPO, 'node_modules/dependency-cruiser/bin/dependency-cruise.mjs');

interface Violation {
  from: string;
  to: string;
  rule: { name: string };
  cycle?: Array<{ name: string }>;
}

async function cruise(cwd: string): Promise<{ modules: number; violations: Violation[] }> {
  const args = [CLI, 'apps', 'libs', '--config', join(REPO, '.dependency-cruiser.cjs'), '--output-type', 'json'];
  // Exits non-zero when it finds violations; the JSON on stdout says which.
  const { stdout } = await promisify(execFile)(process.execPath, args, { cwd, maxBuffer: 64 * 1024 * 1024 }).catch((err: { stdout?: string }) => {
    if (!err.stdout) throw err;
    return { stdout: err.stdout };
  });
  const { summary } = JSON.parse(stdout) as { summary: { totalCruised: number; violations: Violation[] } };
  return { modules: summary.totalCruised, violations: summary.violations };
}

const describeViolation = (v: Violation) => `${v.rule.name}: ${v.from} -> ${v.cycle ? v.cycle.map((m) => m.name).join(' -> ') : v.to}`;

test('apps/ and libs/ have no import cycle, and no lib imports an app', async () => {
  const { modules, violations } = await cruise(REPO);
  expect(violations.map(describeViolation)).toEqual([]);
  // It read the tree, not an empty graph.
  expect(modules).toBeGreaterThan(200);
}, 120_000);

test('the rules catch a planted cycle and a lib importing an app', async () => {
  const root = mkdtempSync(join(tmpdir(), 'dependency-rules-'));
  try {
    const files: Record<string, string> = {
      'tsconfig.json': JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext' } }),
      'libs/a/one.ts': "import { two } from './two.js';\nexport const one = () => two;\n",
      'libs/a/two.ts': "import { one } from './one.js';\nexport const two = 2;\nexport const again = one;\n",
      'libs/a/uses-app.ts': "import { app } from '../../apps/x/app.js';\nexport const used = app;\n",
      'apps/x/app.ts': 'export const app = 1;\n',
    };
    for (const [file, text] of Object.entries(files)) {
      mkdirSync(dirname(join(root, file)), { recursive: true });
      writeFileSync(join(root, file), text);
    }
    const { violations } = await cruise(root);
    expect(violations.map(describeViolation).sort()).toEqual([
      'libs-not-apps: libs/a/uses-app.ts -> apps/x/app.ts',
      expect.stringMatching(/^no-cycle: libs\/a\/(one|two)\.ts -> /),
    ]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}, 120_000);

test('no lib reads process.env: configuration is parsed in each app\'s entry point and passed in', async () => {
  const { readdirSync, readFileSync } = await import('node:fs');
  const files = readdirSync(join(REPO, 'libs'), { recursive: true }).map(String).filter((f) => f.endsWith('.ts'));
  expect(files.length).toBeGreaterThan(50);
  // Comment lines may name it (to say why not); code may not.
  const reading = files.filter((f) => readFileSync(join(REPO, 'libs', f), 'utf8').split('\n').some((line) => /process\.env\b/.test(line) && !/^\s*(\/\/|\*|\/\*)/.test(line)));
  expect(reading).toEqual([]);
});
