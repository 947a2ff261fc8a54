// Checked by test/unit/dependency-rules.test.ts (so `npm test` and CI run it).
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-cycle',
      comment: 'A cycle makes load order matter and the parts impossible to use or test apart.',
      severity: 'error',
      from: {},
      // Type-only imports vanish at run time but still tie the modules together.
      to: { circular: true },
    },
    {
      name: 'libs-not-apps',
      comment: 'libs/ serve the apps; an app is the one place that wires them together.',
      severity: 'error',
      from: { path: '^libs/' },
      to: { path: '^apps/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
    exclude: { path: '^apps/api/portal/ui/' },
  },
};
