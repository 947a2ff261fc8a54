import { KeyedConcurrency, TooManyInFlightError } from '../../apps/api/rate-limit.js';

/** Work that finishes when the test says so. */
function held() {
  let finish!: () => void;
  const done = new Promise<void>((resolve) => (finish = resolve));
  return { work: () => done, finish };
}

describe('KeyedConcurrency', () => {
  it('runs two of a key at once and starts the waiting ones in arrival order as slots free', async () => {
    const limit = new KeyedConcurrency(2, 8, 5_000);
    const started: string[] = [];
    const jobs = ['a', 'b', 'c', 'd'].map((name) => ({ name, ...held() }));
    const runs = jobs.map((job) => limit.run('m_1', () => (started.push(job.name), job.work())));
    await Promise.resolve();
    expect(started).toEqual(['a', 'b']);
    jobs[1]!.finish();
    await runs[1];
    await new Promise(setImmediate);
    expect(started).toEqual(['a', 'b', 'c']);
    jobs[0]!.finish();
    await runs[0];
    await new Promise(setImmediate);
    expect(started).toEqual(['a', 'b', 'c', 'd']);
    jobs[2]!.finish();
    jobs[3]!.finish();
    await Promise.all(runs);
  });

  it('does not count one key against another', async () => {
    const limit = new KeyedConcurrency(1, 0, 5_000);
    const first = held();
    const running = limit.run('m_1', first.work);
    await expect(limit.run('m_2', async () => 'other')).resolves.toBe('other');
    await expect(limit.run('m_1', async () => 'refused')).rejects.toBeInstanceOf(TooManyInFlightError);
    first.finish();
    await running;
    await expect(limit.run('m_1', async () => 'again')).resolves.toBe('again');
  });

  it('refuses a waiter after its wait, and gives its turn to no one', async () => {
    const limit = new KeyedConcurrency(1, 1, 50);
    const first = held();
    const running = limit.run('m_1', first.work);
    const waited = limit.run('m_1', async () => 'late');
    await expect(waited).rejects.toMatchObject({ retryAfterSeconds: 1 });
    first.finish();
    await running;
    await expect(limit.run('m_1', async () => 'next')).resolves.toBe('next');
  });
});
