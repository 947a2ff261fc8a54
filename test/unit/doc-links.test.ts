import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** Every markdown file of the repository (not dependencies or builds). */
function markdownFiles(dir = '.'): string[] {
  return readdirSync(dir).flatMap((name) => {
    if (['node_modules', 'dist', '.git', '.data', 'coverage', 'profiles'].includes(name)) return [];
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return markdownFiles(path);
    return name.endsWith('.md') ? [path] : [];
  });
}

/** GitHub's anchor for a heading: lower case, markup and punctuation dropped (not `_`, which GitHub keeps), spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[`*]/g, '')
    .replace(/[^\p{L}\p{N}_ -]/gu, '')
    .replace(/ /g, '-');
}

function anchorsOf(file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const [, heading] of text.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(heading!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

describe('links between the documents', () => {
  it('point at files that exist, and at headings those files have', () => {
    const broken: string[] = [];
    let checked = 0;
    for (const file of markdownFiles()) {
      const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        if (/^[a-z]+:/i.test(target!)) continue; // http(s), mailto
        checked++;
        const [path, anchor] = target!.split('#') as [string, string | undefined];
        const resolved = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
        if (!existsSync(resolved)) {
          broken.push(`${file}: ${target} (no ${relative('.', resolved)})`);
          continue;
        }
        if (anchor && resolved.endsWith('.md') && !anchorsOf(resolved).has(anchor)) broken.push(`${file}: ${target} (no heading #${anchor})`);
      }
    }
    expect(broken).toEqual([]);
    expect(checked).toBeGreaterThan(10);
  });
});
