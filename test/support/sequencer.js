// Jest's test sequencer, with a start on a fresh checkout: Jest runs the slowest files first when
// its cache (under /tmp, keyed by the checkout's path) has their times; on a fresh checkout, as in
// every CI run, it has none and would go by file size, where a small but slow file started last
// made the run longer by a minute. test/durations.json holds the files' seconds from measured runs
// (only the order depends on it). A file missing from it runs before every listed one (Jest's rule
// for a file without a time: it may be slow), so test/unit/durations.test.ts wants every file
// listed. After a run of some or all files with --json, merge their times in (the other files keep
// theirs, files no longer in test/ are dropped):
//   node test/support/sequencer.js test-results.json [more-results.json ...]
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import Sequencer from '@jest/test-sequencer';

const HINTS = new URL('../durations.json', import.meta.url);

function hints() {
  try {
    return JSON.parse(readFileSync(HINTS, 'utf8'));
  } catch {
    return {};
  }
}

export default class SlowFirstSequencer extends Sequencer {
  #hints = hints();

  time(test) {
    const cached = super.time(test);
    if (cached !== undefined && cached !== null) return cached;
    const hint = this.#hints[relative(test.context.config.rootDir, test.path)];
    return hint === undefined ? undefined : hint * 1000;
  }
}

/** The test files the sequencer orders (test/cluster has a run of its own). */
function testFiles(root = process.cwd()) {
  return readdirSync(join(root, 'test'), { recursive: true })
    .map((file) => join('test', String(file)))
    .filter((file) => file.endsWith('.test.ts') && !file.startsWith(join('test', 'cluster')));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const seconds = hints();
  for (const output of process.argv.length > 2 ? process.argv.slice(2) : ['test-results.json']) {
    for (const file of JSON.parse(readFileSync(output, 'utf8')).testResults) {
      seconds[relative(process.cwd(), file.name)] = Math.round((file.endTime - file.startTime) / 1000);
    }
  }
  const present = new Set(testFiles());
  const sorted = Object.entries(seconds)
    .filter(([file]) => present.has(file))
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  writeFileSync(HINTS, `${JSON.stringify(Object.fromEntries(sorted), null, 2)}\n`);
}
