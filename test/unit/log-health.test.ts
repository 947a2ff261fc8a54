import { jest } from '@jest/globals';
import { LogHealth } from '../../libs/delivery-store/index.js';

describe('the delivery log health check', () => {
  afterEach(() => jest.useRealTimers());

  it('keeps one timer when started twice, and none once stopped (twice)', async () => {
    jest.useFakeTimers();
    let queries = 0;
    const db = { query: async () => (queries++, { rows: [] as never[] }) };
    const health = new LogHealth(db, 'webhooks.deliveries', 1_000);
    await Promise.all([health.start(), health.start()]);
    expect(jest.getTimerCount()).toBe(1);
    expect(queries).toBe(1);
    health.stop();
    health.stop();
    expect(jest.getTimerCount()).toBe(0);
  });
});
