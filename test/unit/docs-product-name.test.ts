import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { USER_AGENT } from '../../apps/dispatcher/program.js';

/**
 * One product name: "Nucleus Webhooks" in prose, `nucleus-webhooks` as a slug (the npm package,
 * the compose project, the user agent). The program names (`webhooks-dispatcher`, the `webhooks`
 * CLI, the `webhooks.*` topology) are part of the contract and stay. The names the product had
 * before must not come back anywhere a reader or an operator sees them.
 */
const FORMER_NAMES = /webhook[- ]relay\b|payment[- ]webhooks/i;
/** Either spelling of the name, to find the ones spelt otherwise ("Nucleus webhooks", "nucleus_webhooks"). */
const ANY_SPELLING = /nucleus[\s_-]*webhooks/gi;
/** The name, the slug, and the slug where a hyphen cannot go (a PostgreSQL role and database, a RabbitMQ vhost). */
const SPELLINGS = new Set(['Nucleus Webhooks', 'nucleus-webhooks', 'nucleus_webhooks']);

/** Every file of the product a reader, an operator or a merchant sees, and the sources and tests. */
function productFiles(): string[] {
  const roots = ['README.md', 'BENCHMARKS.md', '.env.example', 'package.json', 'package-lock.json', 'docs', 'docker', 'config', 'apps', 'libs', 'bench', 'test', '.ci'];
  const files: string[] = [];
  for (const root of roots) {
    if (!statSync(root, { throwIfNoEntry: false })) continue;
    if (statSync(root).isFile()) files.push(root);
    else files.push(...readdirSync(root, { recursive: true }).map((f) => join(root, String(f))).filter((f) => statSync(f).isFile() && !/\.(png|jpg|ico|woff2?)$/.test(f)));
  }
  return files.filter((f) => f !== join('test', 'unit', 'docs-product-name.test.ts'));
}

describe('the product name', () => {
  it('is the package\'s, the compose project\'s and the user agent\'s slug, with the package\'s version', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { name: string; version: string };
    const lock = JSON.parse(readFileSync('package-lock.json', 'utf8')) as { name: string; packages: Record<string, { name?: string }> };
    expect(pkg.name).toBe('nucleus-webhooks');
    expect(lock.name).toBe('nucleus-webhooks');
    expect(lock.packages['']!.name).toBe('nucleus-webhooks');
    expect(readFileSync('docker/compose.yaml', 'utf8')).toMatch(/^name: nucleus-webhooks$/m);
    expect(USER_AGENT.split(' ')[0]).toBe(`nucleus-webhooks/${pkg.version}`);
  });

  it('titles the README', () => {
    expect(readFileSync('README.md', 'utf8').split('\n')[0]).toBe('# Nucleus Webhooks');
  });

  it('is spelt one way, and no former name remains', () => {
    const files = productFiles();
    expect(files.length).toBeGreaterThan(100);
    const wrong: string[] = [];
    for (const file of files) {
      const text = readFileSync(file, 'utf8');
      text.split('\n').forEach((line, i) => {
        if (FORMER_NAMES.test(line)) wrong.push(`${file}:${i + 1}: ${line.trim().slice(0, 120)}`);
        for (const m of line.matchAll(ANY_SPELLING)) if (!SPELLINGS.has(m[0])) wrong.push(`${file}:${i + 1}: ${m[0]}`);
      });
    }
    expect(wrong).toEqual([]);
  });
});
