import { DirectoryCache } from '../../libs/merchants/cache.js';
import { idDigest, TOMBSTONE_KEEP_MS } from '../../libs/merchants/rows.js';

/**
 * What a program's directory holds of deleted merchants (their tombstones): a merchant deleted within
 * the day is told from one never known (its webhooks dropped, not parked), for a day, in a program
 * running for weeks as in one started now (docs/production.md "Deleting a merchant's data").
 */
describe("the directory's tombstones", () => {
  const day = TOMBSTONE_KEEP_MS;

  it('tells a merchant deleted within the day; one deleted longer ago is unknown, as to a program started now', () => {
    const cache = new DirectoryCache();
    cache.bury(idDigest('m_today'), Date.now() - 60_000);
    cache.bury(idDigest('m_yesterday'), Date.now() - day - 60_000);
    expect(cache.deleted('m_today', Date.now)).toBe(true);
    expect(cache.deleted('m_yesterday', Date.now)).toBe(false);
    expect(cache.deleted('m_never', Date.now)).toBe(false);
  });

  it('holds a day of deletes, not every one since it started', () => {
    const cache = new DirectoryCache();
    for (let n = 0; n < 1_000; n++) cache.bury(idDigest(`m_old_${n}`), Date.now() - day - n);
    cache.bury(idDigest('m_new'), Date.now());
    cache.forgetExpired(Date.now());
    expect((cache as unknown as { buried: Map<string, number> }).buried.size).toBe(1);
    expect(cache.deleted('m_new', Date.now)).toBe(true);
  });
});
