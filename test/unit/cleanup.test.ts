import { Cleanup } from '../../libs/runtime/index.js';

describe('the start-up cleanup stack', () => {
  it('closes what was opened, newest first, past a close that fails, and throws the start-up error', async () => {
    const cleanup = new Cleanup();
    const closed: string[] = [];
    cleanup.add(() => closed.push('port'));
    cleanup.add(async () => {
      closed.push('database');
      throw new Error('close failed');
    });
    cleanup.add(async () => closed.push('broker'));
    await expect(cleanup.guard(async () => Promise.reject(new Error('ADMIN_PORT taken')))).rejects.toThrow('ADMIN_PORT taken');
    expect(closed).toEqual(['broker', 'database', 'port']);
  });

  it('closes nothing when start-up succeeds', async () => {
    const cleanup = new Cleanup();
    const closed: string[] = [];
    cleanup.add(() => closed.push('port'));
    await expect(cleanup.guard(async () => 'started')).resolves.toBe('started');
    expect(closed).toEqual([]);
  });
});
