import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * test/durations.json orders the files on a fresh checkout, the slowest first (test/support/
 * sequencer.js). A file missing from it runs before all the listed ones, whatever its time: with a
 * third of the files missing, the slowest started only after them. Its time comes from a run of it
 * with --json: `node test/support/sequencer.js test-results.json` merges it in.
 */
describe('test/durations.json', () => {
  const files = readdirSync('test', { recursive: true })
    .map((file) => join('test', String(file)))
    .filter((file) => file.endsWith('.test.ts') && !file.startsWith(join('test', 'cluster')))
    .sort();
  const listed = JSON.parse(readFileSync('test/durations.json', 'utf8')) as Record<string, number>;

  it('gives every test file its seconds, and names no file that is gone', () => {
    expect({ missing: files.filter((file) => !(file in listed)), gone: Object.keys(listed).filter((file) => !files.includes(file)) }).toEqual({ missing: [], gone: [] });
    for (const seconds of Object.values(listed)) expect(Number.isInteger(seconds) && seconds >= 0).toBe(true);
  });
});
