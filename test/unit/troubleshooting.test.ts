/**
 * docs/troubleshooting.md quotes what the programs print under "**You see**": each quoted message
 * (a code span there, "…" for what the program fills in) must be a string literal of apps/ or libs/,
 * so that a message reworded in the code cannot leave the guide quoting one nobody will ever see.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { literalsOf, quotedIn, sourceLiterals } from '../support/string-literals.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const doc = readFileSync(join(REPO, 'docs/troubleshooting.md'), 'utf8');
const literals = sourceLiterals(REPO, ['apps', 'libs']);

/** Each problem: its heading and its "You see", "Why" and "Fix" paragraphs. */
const problems = doc
  .split(/^## /m)
  .slice(1)
  .map((section) => {
    const title = section.slice(0, section.indexOf('\n'));
    // "You see" runs up to the next bold field ("**Why**", "**Why and fix**", "**Fix**").
    const youSee = /\*\*You see\*\*([\s\S]*?)(?=^\*\*\w|$(?![\s\S]))/m.exec(section)?.[1] ?? '';
    // Fenced blocks are examples of whole lines, with the values of one run and others' words (Node's).
    const quoted = [...youSee.replace(/^```[\s\S]*?^```/gm, '').matchAll(/`([^`]+)`/g)].map((m) => m[1]!.replace(/\s+/g, ' '));
    return { title, section, youSee, quoted };
  });

describe('docs/troubleshooting.md', () => {
  it('covers at least ten problems, each with what you see, why and the fix', () => {
    expect(problems.length).toBeGreaterThanOrEqual(10);
    for (const { title, section, quoted } of problems) {
      expect({ title, youSee: section.includes('**You see**'), why: /\*\*Why\b/.test(section), fix: /\*\*(Fix|Why and fix)\*\*/.test(section), quotes: quoted.length > 0 }).toEqual({
        title,
        youSee: true,
        why: true,
        fix: true,
        quotes: true,
      });
    }
  });

  it('quotes only messages the code has, as string literals in apps/ or libs/', () => {
    const quoted = problems.flatMap(({ title, quoted }) => quoted.map((message) => ({ title, message })));
    expect(quoted.length).toBeGreaterThanOrEqual(30);
    expect(quoted.filter(({ message }) => !quotedIn(message, literals))).toEqual([]);
  });
});

describe('reading string literals', () => {
  it('reads quotes, templates with their ${} as …, and joins literals added with +', () => {
    const source = [
      "// don't: a comment's quote is not a string",
      "const a = 'it\\'s ' +",
      '  "joined";',
      'const b = `resent ${count} times, ${names.join(\', \')} left`;',
      '/* "skipped" */',
    ].join('\n');
    expect(literalsOf(source)).toEqual(["it's joined", 'resent … times, … left', ', ']);
  });

  it('finds a message with … for what the program fills in, and not one the code never prints', () => {
    const known = ['resent … times in the last 24 hours', 'broker connect failed'];
    expect(quotedIn('resent … times in the last 24 hours', known)).toBe(true);
    expect(quotedIn('… times in the last …', known)).toBe(true);
    expect(quotedIn('resent 10 times in the last 24 hours', known)).toBe(false);
    expect(quotedIn('broker connection failed', known)).toBe(false);
    expect(quotedIn('…', known)).toBe(false);
  });
});
