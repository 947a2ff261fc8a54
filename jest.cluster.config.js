// The cluster tests (npm run test:cluster): a three-node RabbitMQ cluster started on this machine,
// nodes killed with kill -9. Kept out of `npm test` so that it stays fast; .ci/run runs both.
import base from './jest.config.js';

export default {
  ...base,
  testMatch: ['<rootDir>/test/cluster/**/*.test.ts'],
  testPathIgnorePatterns: ['/node_modules/'],
  globalSetup: '<rootDir>/test/cluster/global-setup.ts',
  globalTeardown: '<rootDir>/test/cluster/global-teardown.ts',
  testTimeout: 300_000,
  // One file at a time: the files share one cluster and kill its nodes.
  maxWorkers: 1,
};
