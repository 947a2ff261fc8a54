// Native ESM: got@14 is ESM-only, so the whole project is ESM and Jest runs with
// --experimental-vm-modules (see the "test" script) instead of transforming got to CommonJS.
export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: 'tsconfig.json', diagnostics: false }],
  },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  // The cluster tests start their own three-node cluster: npm run test:cluster.
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/cluster/'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 60000,
  // One file at a time: the fault tests stop and start the shared broker.
  maxWorkers: 1,
};
