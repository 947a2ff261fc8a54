// Native ESM: the project is ESM, as the programs run, and Jest runs it with
// --experimental-vm-modules (see the "test" script) instead of transforming it to CommonJS.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { runsAlone, runsQuiet } from './test/support/runner.js';

/** The test files whose first docblock says `@runs-alone` or `@runs-quiet` (see test/support/runner.js). */
function runsAloneFiles() {
  return readdirSync('test', { recursive: true })
    .map((file) => join('test', String(file)))
    .filter((file) => file.endsWith('.test.ts') && (runsAlone(file) !== undefined || runsQuiet(file) !== undefined));
}

const escape = (path) => path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const ignored = ['/node_modules/', '<rootDir>/test/cluster/'];
// RUNS_ALONE=skip leaves the files that stop or block the shared broker or database out (to test
// beside someone else using them), and the quiet ones (they time what a busy machine stretches);
// RUNS_ALONE=only runs just those.
const mode = process.env.RUNS_ALONE;
const alone = mode === 'skip' || mode === 'only' ? runsAloneFiles() : [];

export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: 'tsconfig.json', diagnostics: false }],
  },
  testMatch: mode === 'only' ? alone.map((file) => `<rootDir>/${file}`) : ['<rootDir>/test/**/*.test.ts'],
  // The cluster tests start their own three-node cluster: npm run test:cluster.
  testPathIgnorePatterns: mode === 'skip' ? [...ignored, ...alone.map((file) => `<rootDir>/${escape(file)}$`)] : ignored,
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 60000,
  // Each file has its own topology prefix and database, so files run in parallel; the files marked
  // `@runs-quiet` (they time in seconds) run after, two at a time, then those marked `@runs-alone`
  // (they stop or block the shared broker or database) one at a time.
  runner: '<rootDir>/test/support/runner.js',
  // Three: with the cluster suite beside them (three RabbitMQ nodes), four workers loaded two cores past
  // what the timing cases allow (load 12-14: startup's 5 s, the collector's 8 s) once fan-out's files came.
  maxWorkers: 3,
  // The slowest files first, also on a fresh checkout (test/durations.json).
  testSequencer: '<rootDir>/test/support/sequencer.js',
};
