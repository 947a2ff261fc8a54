/**
 * The string literals of TypeScript sources, for checks that a message quoted in the docs is one the
 * code can print. A template literal keeps its `${…}` parts as "…"; literals joined with `+` are one.
 * A small scanner, not a parser: comments are skipped, regular expression literals are not
 * recognised (a quote inside one may swallow text up to the next quote, which only adds text).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const PLACEHOLDER = '…';

interface Literal {
  text: string;
  start: number;
  end: number;
}

/** The literals of one source text, in order. */
export function literalsOf(source: string): string[] {
  const found: Literal[] = [];
  let i = 0;
  const n = source.length;
  // Reads a quoted string from the opening quote at `at`; returns its text and the index after it.
  const quoted = (at: number): { text: string; next: number } => {
    const quote = source[at]!;
    let text = '';
    let j = at + 1;
    while (j < n && source[j] !== quote) {
      if (source[j] === '\\') {
        text += unescape(source[j + 1]!);
        j += 2;
      } else if (source[j] === '\n') {
        break; // an unterminated quote: stop at the line's end
      } else {
        text += source[j++];
      }
    }
    return { text, next: j + 1 };
  };
  // Reads a template literal from its backtick; `${…}` becomes PLACEHOLDER (nested literals inside are read too).
  const template = (at: number): { text: string; next: number } => {
    let text = '';
    let j = at + 1;
    while (j < n && source[j] !== '`') {
      if (source[j] === '\\') {
        text += unescape(source[j + 1]!);
        j += 2;
      } else if (source[j] === '$' && source[j + 1] === '{') {
        let depth = 1;
        j += 2;
        while (j < n && depth > 0) {
          const c = source[j]!;
          if (c === '{') depth++;
          else if (c === '}') depth--;
          else if (c === "'" || c === '"') {
            const inner = quoted(j);
            found.push({ text: inner.text, start: j, end: inner.next });
            j = inner.next;
            continue;
          } else if (c === '`') {
            const inner = template(j);
            found.push({ text: inner.text, start: j, end: inner.next });
            j = inner.next;
            continue;
          }
          j++;
        }
        text += PLACEHOLDER;
      } else {
        text += source[j++];
      }
    }
    return { text, next: j + 1 };
  };
  while (i < n) {
    const c = source[i]!;
    if (c === '/' && source[i + 1] === '/') {
      i = source.indexOf('\n', i);
      if (i < 0) break;
    } else if (c === '/' && source[i + 1] === '*') {
      i = source.indexOf('*/', i + 2);
      if (i < 0) break;
      i += 2;
    } else if (c === "'" || c === '"') {
      const { text, next } = quoted(i);
      found.push({ text, start: i, end: next });
      i = next;
    } else if (c === '`') {
      const { text, next } = template(i);
      found.push({ text, start: i, end: next });
      i = next;
    } else {
      i++;
    }
  }
  // 'a ' + 'b' is one message.
  found.sort((a, b) => a.start - b.start);
  const joined: Literal[] = [];
  for (const literal of found) {
    const last = joined.at(-1);
    if (last && /^\s*\+\s*$/.test(source.slice(last.end, literal.start))) {
      last.text += literal.text;
      last.end = literal.end;
    } else {
      joined.push({ ...literal });
    }
  }
  return joined.map((l) => l.text);
}

function unescape(c: string): string {
  return ({ n: '\n', t: '\t', r: '\r' } as Record<string, string>)[c] ?? c;
}

/** Every literal of the .ts files under the given folders (relative to `root`). */
export function sourceLiterals(root: string, folders: readonly string[]): string[] {
  return folders.flatMap((folder) =>
    (readdirSync(join(root, folder), { recursive: true }) as string[])
      .filter((file) => file.endsWith('.ts'))
      .flatMap((file) => literalsOf(readFileSync(join(root, folder, file), 'utf8'))),
  );
}

/**
 * Whether a quoted message is one of the literals: its text, with "…" standing for any part the
 * program fills in, is found in one literal, the parts in order (a "…" may stand for a `${…}` of
 * the literal or for text left out).
 */
export function quotedIn(message: string, literals: readonly string[]): boolean {
  const parts = message.split(PLACEHOLDER).map((part) => part.trim()).filter((part) => part !== '');
  if (parts.length === 0) return false;
  const pattern = new RegExp(parts.map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('[\\s\\S]*?'));
  return literals.some((literal) => pattern.test(literal));
}
