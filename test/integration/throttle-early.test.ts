import { Throttle } from '../../apps/dispatcher/stages/throttle.js';
import { silentLogger } from '../../libs/logger/index.js';
import type { Endpoint } from '../../libs/merchants/index.js';
import { useTestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

/** How long the slow dispatcher's statements wait before they reach PostgreSQL, as for a connection of a busy pool. */
const CHECKOUT_MS = 300;

/**
 * A dispatcher whose pool is busy (a burst's wait writes, a large pick) waits for a connection
 * before its take reaches PostgreSQL. Its slot was timed from the take's start while PostgreSQL read
 * it from the statement's: it sent that wait early, beside the other dispatchers' slots (about 65 a
 * second at 50/s). Seen failing so: sent 300 ms before its slot. A send now goes no earlier than
 * 50 ms before the latest place its take's round trip leaves for the slot.
 */
describe('a throttled take whose statement waited for a pooled connection', () => {
  const postgres = useTestDatabase('throttle_early', { maxConnections: 4 });

  it('sends at its slot, not as early as the wait', async () => {
    const { database } = postgres;
    const webhook = { id: 'ep_early', maxPerSecond: 10 } as Endpoint;
    const quick = new Throttle(database, silentLogger());
    // Its takes only: the slot is what the wait moves.
    const slow = new Throttle({ query: async (text, params) => {
      if (text.includes('rate_limits')) await new Promise((resolve) => setTimeout(resolve, CHECKOUT_MS));
      return database.query(text, params as never);
    } }, silentLogger());
    // The quick dispatcher holds the next nine slots (100 ms apart): the slow one's is more than 500 ms ahead when it asks, past its wait.
    const held = Promise.all(Array.from({ length: 9 }, () => quick.admit('m_early', webhook, () => false, true)));
    const ahead = async () => Number((await database.query<{ ms: number }>(
      "SELECT COALESCE(EXTRACT(EPOCH FROM tat - now()) * 1000, 0)::float8 AS ms FROM rate_limits RIGHT JOIN (SELECT 1) one ON key = 'throttle:m_early' || chr(31) || 'ep_early'")).rows[0]!.ms);
    await waitFor('the quick one holding its slots', async () => (await ahead()) > 500, 5_000, 5);
    const slots = async () => Number((await database.query<{ ms: number }>(
      "SELECT (EXTRACT(EPOCH FROM tat) * 1000)::float8 AS ms FROM rate_limits WHERE key = 'throttle:m_early' || chr(31) || 'ep_early'")).rows[0]!.ms);
    const before = await slots();
    const verdict = await slow.admit('m_early', webhook, () => false, true);
    const sentAt = Date.now();
    // Its slot, if it took one and sent on it: the cell's tat less one interval (a burst of one), on PostgreSQL's clock (this host's).
    const slotAt = (await slots()) - 100;
    expect(verdict.kind).toBe('go');
    expect(slotAt).toBeGreaterThan(before - 100);
    // No earlier than SLOT_SLACK_MS (50 ms) before the slot's latest place, the answer's arrival less the way back.
    expect(sentAt - slotAt).toBeGreaterThanOrEqual(-60);
    await held;
  });
});
