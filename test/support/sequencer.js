// Jest's test sequencer, with a start on a fresh checkout: Jest runs the slowest files first when
// its cache (under /tmp, keyed by the checkout's path) has their times, and by file size when it
// has none, as in every CI run, where a small but slow file started last made the run longer by a
// minute. test/durations.json holds the files' seconds from a measured run (only the order
// depends on it; a file missing from it goes by its size after the listed ones):
//   node test/support/sequencer.js test-results.json   (the --json output of a full npm test)
import { readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
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

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const results = JSON.parse(readFileSync(process.argv[2] ?? 'test-results.json', 'utf8'));
  const seconds = Object.fromEntries(
    results.testResults
      .map((file) => [relative(process.cwd(), file.name), Math.round((file.endTime - file.startTime) / 1000)])
      .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])),
  );
  writeFileSync(HINTS, `${JSON.stringify(seconds, null, 2)}\n`);
}
