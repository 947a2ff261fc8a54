// Preloaded with `node --import` by tests (NODE_OPTIONS): SIGUSR2 makes a promise rejection that
// nothing handles, as a bug in the program would, its error carrying a field no log may show.
process.on('SIGUSR2', () => {
  void Promise.reject(Object.assign(new Error('provoked by the test'), { code: 'E_PROVOKED', password: 'hunter2-never-logged' }));
});
