import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The documentation the doc checks read: README.md and every docs/*.md, with their text. The two
 * copies of the shared design documents (docs/DESIGN.md, docs/webhook-service-spec.md) are
 * included: they are shipped with the rest and must not name what does not exist either.
 */
export function documents(): Array<{ file: string; text: string }> {
  const files = ['README.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).map((f) => join('docs', f))];
  return files.map((file) => ({ file, text: readFileSync(file, 'utf8') }));
}

/** Where a match is, as file:line, for failure messages. */
export function lineOf(text: string, index: number): number {
  return text.slice(0, index).split('\n').length;
}
