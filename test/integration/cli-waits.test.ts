/**
 * `webhooks waits list` on the real PostgreSQL: a webhook waits once per endpoint (one row each), so
 * the list says which endpoint each wait is for and filters by one, as `failed list` and `log` do;
 * every reason a row holds ('ordered' included) is shown and given in --json, and a row parked
 * behind its circuit or spent (out of the pick: wait-not-ended) is shown as such.
 */
import { randomUUID } from 'node:crypto';
import { WAIT_TAKE_LIMIT } from '../../libs/waits/index.js';
import { runCliInProcess } from '../support/cli.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';

interface WaitJson {
  dueAt: string;
  merchantId: string;
  endpointId: string | null;
  webhookId: string;
  attempts: number;
  reason: string;
  handedUntil: string | null;
  parked: boolean;
  spent: boolean;
}

describe('webhooks waits list', () => {
  let db: TestDatabase;
  // Ids as the service makes them: ep_ and 22 characters, evt_ and a UUID (the publisher's).
  const epA = 'ep_AAAAAAAAAAAAAAAAAAAAAA';
  const epB = 'ep_BBBBBBBBBBBBBBBBBBBBBB';
  const [first, second, third, fourth, fifth, sixth] = [`evt_${randomUUID()}`, `evt_${randomUUID()}`, `evt_${randomUUID()}`, `evt_${randomUUID()}`, `evt_${randomUUID()}`, `evt_${randomUUID()}`];
  const cli = (...args: string[]) => runCliInProcess({ DATABASE_URL: db.url }, ['waits', 'list', ...args]);

  beforeAll(async () => {
    db = await createTestDatabase('cli_waits');
    // As the dispatchers leave them: one webhook waiting on two endpoints of m_shop (a retry; one
    // parked behind its endpoint's open circuit), an 'ordered' wait (no pick time: webhook_order_step's),
    // and a throttled wait written before endpoints (endpoint '') whose copy is on its way. And a
    // retry due an hour ago that the pick parked behind the open circuit: not overdue, it waits for
    // its endpoint (until its span ends, in a day), and the list says so. And a retry due two hours
    // ago that its takes left out of the pick (WAIT_TAKE_LIMIT: its copy parked as wait-not-ended):
    // not an ordinary overdue retry, it is never handed back. And a retry due half an hour ago that
    // its closed circuit's unpark made due a moment ago (pick time past its due time, and past): due, not handed.
    await db.query(
      `INSERT INTO webhook_waits (merchant_id, webhook_id, endpoint_id, attempt, due_at, pick_at, reason, headers, parked, hand) VALUES
        ('m_shop', $1, $4, 2, now() + interval '1 minute', now() + interval '1 minute', 'retry', '{}', false, 1),
        ('m_shop', $1, $5, 1, now() + interval '2 minutes', now() + interval '1 hour', 'circuit-open', '{}', true, 1),
        ('m_shop', $2, $5, 0, now() + interval '3 minutes', NULL, 'ordered', '{}', false, 0),
        ('m_other', $3, '', 0, now() + interval '4 minutes', now() + interval '5 minutes', 'throttled', '{}', false, 3),
        ('m_shop', $6, $5, 3, now() - interval '1 hour', now() + interval '1 day', 'retry', '{}', true, 4),
        ('m_shop', $7, $4, 1, now() - interval '2 hours', NULL, 'retry', '{}', false, 11),
        ('m_shop', $8, $4, 1, now() - interval '30 minutes', now() - interval '1 second', 'retry', '{}', false, 0)`,
      [first, second, third, epA, epB, fourth, fifth, sixth],
    );
    await db.query('UPDATE webhook_waits SET takes = $2 WHERE webhook_id = $1', [fifth, WAIT_TAKE_LIMIT + 1]);
  });

  afterAll(async () => {
    await db?.drop();
  });

  it('shows each wait with its endpoint (- before endpoints), soonest due first, in a table that fits a terminal', async () => {
    const result = await cli();
    expect(result).toMatchObject({ code: 0, stderr: '' });
    const lines = result.stdout.trimEnd().split('\n');
    expect(lines[0]!.split(/\s{2,}/)).toEqual(['DUE', 'MERCHANT', 'ENDPOINT', 'WEBHOOK-ID', 'ATTEMPTS', 'WHY', 'HANDED UNTIL']);
    const rows = lines.slice(1).map((line) => line.split(/\s{2,}/));
    expect(rows.map((row) => row.slice(1, 6))).toEqual([
      // Why it waits now: its takes spent, the circuit, whatever it was written for.
      ['m_shop', epA, fifth, '1', 'wait-not-ended'],
      ['m_shop', epB, fourth, '3', 'circuit-open'],
      ['m_shop', epA, sixth, '1', 'retry'],
      ['m_shop', epA, first, '2', 'retry'],
      ['m_shop', epB, first, '1', 'circuit-open'],
      ['m_shop', epB, second, '0', 'ordered'],
      ['m_other', '-', third, '0', 'throttled'],
    ]);
    // Times to the second; only the wait whose copy is on its way has a HANDED UNTIL.
    for (const row of rows) expect(row[0]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect(rows.map((row) => row[6] ?? '')).toEqual(['', '', '', '', '', '', expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/)]);
    // DUE 20, MERCHANT 8, ENDPOINT 25, WEBHOOK-ID 40, ATTEMPTS 8, WHY 14, HANDED UNTIL 20, and 2 between each: 147.
    expect(Math.max(...lines.map((line) => line.length))).toBeLessThanOrEqual(147);
  });

  it('lists one endpoint\'s waits with --endpoint, alone or with --merchant', async () => {
    const parse = (stdout: string) => (JSON.parse(stdout) as WaitJson[]).map((w) => [w.merchantId, w.endpointId, w.webhookId]);
    expect(parse((await cli('--endpoint', epB, '--json')).stdout)).toEqual([
      ['m_shop', epB, fourth],
      ['m_shop', epB, first],
      ['m_shop', epB, second],
    ]);
    expect(parse((await cli('--merchant', 'm_shop', '--endpoint', epA, '--json')).stdout)).toEqual([['m_shop', epA, fifth], ['m_shop', epA, sixth], ['m_shop', epA, first]]);
    expect(await cli('--merchant', 'm_other', '--endpoint', epA)).toMatchObject({ code: 3, stdout: '' });
    expect(await cli('--endpoint', '')).toMatchObject({ code: 2, stderr: expect.stringContaining('--endpoint takes an endpoint id') });
  });

  it('gives scripts every field in --json: endpointId (null before endpoints), the reason as the row holds it', async () => {
    const result = await cli('--json');
    expect(result.code).toBe(0);
    const waits = JSON.parse(result.stdout) as WaitJson[];
    expect(waits.map((w) => [w.endpointId, w.reason, w.attempts, w.parked, w.spent])).toEqual([
      [epA, 'retry', 1, false, true],
      [epB, 'retry', 3, true, false],
      [epA, 'retry', 1, false, false],
      [epA, 'retry', 2, false, false],
      [epB, 'circuit-open', 1, true, false],
      [epB, 'ordered', 0, false, false],
      [null, 'throttled', 0, false, false],
    ]);
    expect(Object.keys(waits[0]!)).toEqual(['dueAt', 'merchantId', 'endpointId', 'webhookId', 'attempts', 'reason', 'handedUntil', 'parked', 'spent']);
    // The milliseconds stay in JSON.
    expect(waits[0]!.dueAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(waits.map((w) => w.handedUntil === null)).toEqual([true, true, true, true, true, true, false]);
  });
});
