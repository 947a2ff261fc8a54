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

/** The fenced code blocks of a markdown text: each one's body and where it starts (its first line). */
export function codeBlocks(text: string): Array<{ at: number; body: string }> {
  return [...text.matchAll(/^```[a-z]*\n([\s\S]*?)^```/gm)].map((m) => ({ at: m.index + m[0].indexOf('\n') + 1, body: m[1]! }));
}

/** The code spans of a markdown text's prose (not inside a fenced block), each on one line, and where each starts. */
export function codeSpans(text: string): Array<{ at: number; body: string }> {
  const prose = text.replace(/^```[a-z]*\n[\s\S]*?^```/gm, (block) => block.replace(/[^\n]/g, ' '));
  return [...prose.matchAll(/`([^`\n]+)`/g)].map((m) => ({ at: m.index + 1, body: m[1]! }));
}
