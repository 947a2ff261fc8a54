import { Operations } from '../../apps/dispatcher/operations.js';
import type { Decision } from '../../apps/dispatcher/stages/decide.js';
import type { IntakeEvent } from '../../apps/dispatcher/stages/intake.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { PgMerchantDirectory, SecretBox } from '../../libs/merchants/index.js';
import type { IdentifiedEvent, OperationalPublisher } from '../../libs/operational/index.js';
import { TEST_SECRETS_KEY } from '../support/dispatcher-program.js';
import { testMerchant } from '../support/harness.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

const MINUTE = 60_000;
/** ENDPOINT_DISABLE_AFTER of an hour: a tenth is 6 minutes, a clock is stale after 12 without a failure. */
const AFTER = 60 * MINUTE;

/**
 * Auto-disable with dispatchers whose clocks differ by minutes (each runs on its own host): the
 * order of a success and a failure, and how long an endpoint has failed, are PostgreSQL's, never
 * a comparison of one host's clock with a time another host stamped. Each dispatcher here is an
 * Operations given its own `now` (as the dispatcher's `now` dep gives it), on one directory. A
 * host's clock stepped between two failures lengthens no run of them; and a success whose telling
 * PostgreSQL did not answer is told again.
 */
describe('auto-disable with dispatchers whose clocks differ by minutes', () => {
  let db: TestDatabase;
  let database: Database;
  let directory: PgMerchantDirectory;
  const emitted: IdentifiedEvent[] = [];
  const publisher = { emit: (event: IdentifiedEvent) => void emitted.push(event) } as unknown as OperationalPublisher;

  beforeAll(async () => {
    db = await createTestDatabase('auto_disable_clocks');
    database = openPostgres(db.url);
    directory = new PgMerchantDirectory(database, new SecretBox(Buffer.from(TEST_SECRETS_KEY, 'base64')), silentLogger());
    await directory.start();
  });

  afterAll(async () => {
    await directory?.close();
    await database?.close();
    await db?.drop();
  });

  /** A dispatcher whose clock is `skewMs` off PostgreSQL's (which is this host's). */
  const dispatcher = () => new Operations({ merchants: directory, writer: directory, publisher, logger: silentLogger() }, { disableAfterMs: AFTER, intervalMs: 3_600_000 });
  const at = (skewMs: number) => new Date(Date.now() + skewMs);
  const failure: Decision = { kind: 'retry', step: 0, attempt: 2, error: 'HTTP 404', errorClass: 'http_404', status: 404 };
  const success: Decision = { kind: 'delivered', attempt: 1, status: 204 };
  const intake = (merchantId: string): IntakeEvent => ({
    merchantId, event: 'payout', references: [`ref_${merchantId}`], body: '{}', webhookId: `evt_${merchantId}`, attempts: 1,
    deferrals: 0, postponements: 0, firstSeenAt: new Date().toISOString(), accepted: true,
  });
  const endpointOf = (merchantId: string) => directory.byId(merchantId)?.endpoints[0];

  /** The merchant, with a failing clock as dispatchers wrote it: started `sinceMs` ago, its last failure `lastMs` ago (PostgreSQL's time). */
  async function failingFor(merchantId: string, sinceMs: number, lastMs: number): Promise<string> {
    const merchant = testMerchant(merchantId, `https://${merchantId.replace(/_/g, '-')}.example.com/hooks`);
    await directory.update(merchantId, () => merchant);
    const endpoint = merchant.endpoints[0]!;
    await db.query(
      `INSERT INTO endpoint_health (merchant_id, endpoint_id, url, failing_since, last_failure_at)
       VALUES ($1, $2, $3, now() - $4::bigint * interval '1 millisecond', now() - $5::bigint * interval '1 millisecond')`,
      [merchantId, endpoint.id, endpoint.url, sinceMs, lastMs],
    );
    await db.query("SELECT pg_notify('webhooks_merchants', $1)", [merchantId]);
    return waitFor(`the directory to show ${merchantId}'s clock`, () => endpointOf(merchantId)?.failingSince, 15_000);
  }

  const clockIn = async (merchantId: string) =>
    (await db.query<{ failing_since: Date | null; last_failure_at: Date | null; now: Date }>('SELECT failing_since, last_failure_at, now() AS now FROM endpoint_health WHERE merchant_id = $1', [merchantId]))[0]!;
  const enabledIn = async (merchantId: string) =>
    (await db.query<{ enabled: boolean }>("SELECT (endpoints->0->>'enabled')::boolean AS enabled FROM merchants WHERE id = $1", [merchantId]))[0]!.enabled;

  it('does not disable, from a dispatcher 5 minutes ahead, an endpoint failing for 58 of its 60 minutes by PostgreSQL', async () => {
    await failingFor('m_ahead', 58 * MINUTE, MINUTE);
    const ahead = dispatcher();
    ahead.observe(intake('m_ahead'), failure, at(5 * MINUTE));
    await ahead.stop();
    expect(await enabledIn('m_ahead')).toBe(true);
    expect(emitted.filter((e) => e.event.data.merchantId === 'm_ahead')).toHaveLength(0);
  });

  it('ends, on a success seen by a dispatcher 10 minutes behind, the clock another started a minute before it', async () => {
    await failingFor('m_behind', MINUTE, 0);
    const behind = dispatcher();
    behind.observe(intake('m_behind'), success, at(-10 * MINUTE));
    await behind.stop();
    expect((await clockIn('m_behind')).failing_since).toBeNull();
    expect(endpointOf('m_behind')?.failingSince).toBeUndefined();
  });

  it('tells again, on its next failure, a success whose telling PostgreSQL did not answer: the clock it ends is not left running', async () => {
    await failingFor('m_untold', MINUTE, 0);
    // PostgreSQL does not answer the success's telling, then answers again.
    let refuse = true;
    const writer = Object.create(directory) as PgMerchantDirectory;
    writer.recordHealth = (...args) => (refuse ? ((refuse = false), Promise.reject(new Error('connection terminated'))) : directory.recordHealth(...args));
    const one = new Operations({ merchants: directory, writer, publisher, logger: silentLogger() }, { disableAfterMs: AFTER, intervalMs: 3_600_000 });
    one.observe(intake('m_untold'), success, at(0));
    await one.stop();
    expect((await clockIn('m_untold')).failing_since).not.toBeNull();
    one.observe(intake('m_untold'), failure, at(0));
    await one.stop();
    expect((await clockIn('m_untold')).failing_since).toBeNull();
  });

  it('starts no clock on two failures a moment apart, on a dispatcher whose clock was stepped 10 minutes forward between them', async () => {
    const merchant = testMerchant('m_stepped', 'https://m-stepped.example.com/hooks');
    await directory.update(merchant.id, () => merchant);
    await waitFor('the directory to hold m_stepped', () => endpointOf('m_stepped'), 15_000);
    const stepped = dispatcher();
    stepped.observe(intake('m_stepped'), failure, at(0));
    await stepped.stop();
    // Its host's clock stepped (NTP correcting it, say): its run of failures lasted milliseconds, not a tenth.
    stepped.observe(intake('m_stepped'), failure, at(10 * MINUTE));
    await stepped.stop();
    expect(await db.query('SELECT failing_since FROM endpoint_health WHERE merchant_id = $1 AND failing_since IS NOT NULL', ['m_stepped'])).toEqual([]);
  });

  it('keeps the clock of a dead endpoint running on the failures of a dispatcher 15 minutes ahead, never starting it over', async () => {
    const since = await failingFor('m_restart', 30 * MINUTE, MINUTE);
    const ahead = dispatcher();
    // Its own failures span more than a tenth by its clock, and the clock looks stale to it.
    ahead.observe(intake('m_restart'), failure, at(14 * MINUTE));
    await ahead.stop();
    ahead.observe(intake('m_restart'), failure, at(21 * MINUTE));
    await ahead.stop();
    const clock = await clockIn('m_restart');
    expect(clock.failing_since?.toISOString()).toBe(since);
    // Its last failure is PostgreSQL's time, not one in PostgreSQL's future.
    expect(clock.last_failure_at!.getTime()).toBeLessThanOrEqual(clock.now.getTime());
  });

  it('disables, from a dispatcher 15 minutes behind, an endpoint failing for 61 minutes by PostgreSQL, once, stamped by PostgreSQL', async () => {
    await failingFor('m_due', 61 * MINUTE, MINUTE);
    const behind = dispatcher();
    behind.observe(intake('m_due'), failure, at(-15 * MINUTE));
    await behind.stop();
    expect(await enabledIn('m_due')).toBe(false);
    const off = endpointOf('m_due')!;
    expect(off).toMatchObject({ enabled: false, disabledReason: 'failing' });
    expect(Date.parse(off.disabledAt!) - Date.parse(off.failingSince!)).toBeGreaterThanOrEqual(AFTER);
    expect(Math.abs(Date.parse(off.disabledAt!) - Date.now())).toBeLessThan(MINUTE);
    expect(emitted.filter((e) => e.event.data.merchantId === 'm_due').map((e) => e.event.type)).toEqual(['endpoint.disabled']);
  });
});
