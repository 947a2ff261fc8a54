import { readFileSync } from 'node:fs';
import { cliReference } from '../../apps/cli/reference.js';

describe('docs/cli.md', () => {
  it('is what the commander declarations make (run `npm run docs:cli` after changing a command)', () => {
    const expected = cliReference();
    const actual = readFileSync('docs/cli.md', 'utf8');
    // Named, so a stale file says which command or option it lacks.
    const missing = expected.split('\n').filter((line) => /^\s+-|^## /.test(line) && !actual.includes(line));
    expect(missing).toEqual([]);
    expect(actual).toBe(expected);
  });
});
