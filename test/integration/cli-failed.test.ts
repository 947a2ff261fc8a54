import type { ApiProgram } from '../../apps/api/program.js';
import { type EventName, sampleEvent } from '../../libs/contracts/index.js';
import type { Merchant } from '../../libs/merchants/index.js';
import { startTestApi, unresolved } from '../support/api.js';
import { brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

interface FailedJson {
  failedAt: string;
  merchantId: string;
  endpointId: string | null;
  event: string;
  references: string[];
  webhookId: string;
  attempts: number;
  lastStatus: number | null;
  lastError: string;
  resolved: boolean;
  resentAt: string | null;
}

describe('webhooks failed (operator CLI on the failure index)', () => {
  const modes = new Map<string, 'fail' | 'ok'>();
  const receivers = new Map<string, Receiver>();
  const merchants = {} as Record<'alice' | 'bob' | 'carol' | 'dave', Merchant>;
  let harness: Harness;
  let api: ApiProgram;
  let env: Record<string, string>;

  beforeAll(async () => {
    for (const name of ['alice', 'bob', 'carol', 'dave'] as const) {
      const id = `m_${name}`;
      const receiver = await Receiver.start(() => (modes.get(id) === 'ok' ? 200 : 500));
      receivers.set(id, receiver);
      merchants[name] = testMerchant(id, receiver.url);
    }
    // Merchants here fail many times in a row on purpose: keep their circuits closed so a resend is attempted.
    harness = await startHarness({
      name: 'cli-failed',
      merchants: Object.values(merchants),
      retryDelaysMs: [],
      settings: { breakerThreshold: 1_000 },
    });
    api = await startTestApi(harness.prefix);
    // The CLI reads the merchants where the programs do: the merchants table of the harness's database.
    env = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: harness.prefix, DATABASE_URL: harness.database.url };
  });

  afterAll(async () => {
    await api?.stop();
    await harness?.close();
    for (const receiver of receivers.values()) await receiver.close();
  });

  beforeEach(() => {
    for (const { id } of Object.values(merchants)) modes.set(id, 'fail');
  });

  const cli = (...args: string[]) => runCliInProcess(env, args);
  const receiverOf = (merchant: Merchant) => receivers.get(merchant.id)!;

  /** Publishes an event whose single attempt fails, and waits until the failure is in the stream (the API indexed it). */
  async function failedEvent(merchant: Merchant, event: EventName = 'payout') {
    const message = sampleEvent(event, merchant.id);
    const { messageId } = await harness.publisher.publish(message);
    const field = event === 'charge.completed' ? 'tnxRef' : event === 'payout' ? 'reference' : 'refundRef';
    const reference = String(message.data[field]);
    await waitFor(`failure of ${reference} indexed`, async () => (await unresolved(api, merchant.id, reference)) > 0);
    return { message, messageId, reference };
  }

  async function listJson(...args: string[]): Promise<FailedJson[]> {
    const result = await cli('failed', 'list', '--json', ...args);
    expect([0, 3]).toContain(result.code);
    return JSON.parse(result.stdout) as FailedJson[];
  }

  it('lists unresolved failures as a table with aligned columns, oldest first, each with why it failed beside its last error', async () => {
    const first = await failedEvent(merchants.alice, 'payout');
    const second = await failedEvent(merchants.bob, 'charge.completed');

    const result = await cli('failed', 'list');

    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const [header, ...rows] = result.stdout.trimEnd().split('\n');
    expect(header!.split(/\s{2,}/)).toEqual(['FAILED AT', 'MERCHANT', 'ENDPOINT', 'EVENT', 'REFERENCE', 'WEBHOOK ID', 'ATTEMPTS', 'LAST STATUS', 'REASON', 'LAST ERROR']);
    const rowOf = (reference: string) => rows.findIndex((row) => row.includes(reference));
    expect(rowOf(first.reference)).toBeGreaterThanOrEqual(0);
    expect(rowOf(second.reference)).toBeGreaterThan(rowOf(first.reference));
    for (const row of [rows[rowOf(first.reference)]!, rows[rowOf(second.reference)]!]) {
      for (const column of ['MERCHANT', 'ENDPOINT', 'EVENT', 'REFERENCE', 'WEBHOOK ID', 'ATTEMPTS', 'LAST STATUS', 'REASON', 'LAST ERROR']) {
        expect(row[header!.indexOf(column)]).not.toBe(' ');
        expect(row[header!.indexOf(column) - 1]).toBe(' ');
      }
    }
    const aliceRow = rows[rowOf(first.reference)]!;
    expect(aliceRow.slice(header!.indexOf('MERCHANT'))).toMatch(new RegExp(`^${merchants.alice.id}\\s+(-|${merchants.alice.endpoints[0]!.id})\\s+payout\\s+${first.reference}\\s+${first.messageId}\\s+1\\s+500\\s+attempts-exhausted\\s+`));
  });

  it('prints one JSON array with each failure\'s story (failed reason included) for scripts, filtered by merchant and by reference', async () => {
    const payout = await failedEvent(merchants.alice, 'payout');
    const refund = await failedEvent(merchants.alice, 'refund.completed');
    const other = await failedEvent(merchants.bob, 'payout');

    const alices = await listJson('--merchant', merchants.alice.id);
    expect(alices.every((f) => f.merchantId === merchants.alice.id)).toBe(true);
    expect(alices.map((f) => f.webhookId)).toEqual(expect.arrayContaining([payout.messageId, refund.messageId]));
    expect(alices.map((f) => f.webhookId)).not.toContain(other.messageId);

    const [entry, ...rest] = await listJson('--merchant', merchants.alice.id, '--reference', payout.reference);
    expect(rest).toEqual([]);
    expect(entry).toEqual({
      failedAt: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/),
      merchantId: merchants.alice.id,
      // Its endpoint once the dispatcher names it in the failure (fan-out); null on a failure without one.
      endpointId: entry!.endpointId === null ? null : merchants.alice.endpoints[0]!.id,
      event: 'payout',
      references: [payout.reference],
      webhookId: payout.messageId,
      attempts: 1,
      lastStatus: 500,
      failedReason: 'attempts-exhausted',
      lastError: expect.stringContaining('500'),
      resolved: false,
      resentAt: null,
    });

    const byTnxRef = await listJson('--reference', String(refund.message.data.tnxRef));
    expect(byTnxRef.map((f) => f.references)).toEqual([[refund.reference, String(refund.message.data.tnxRef)]]);
  });

  it('filters by failure time, given as ISO-8601 or as a duration ago', async () => {
    const early = await failedEvent(merchants.bob, 'payout');
    const between = new Date();
    const late = await failedEvent(merchants.bob, 'payout');
    const refs = (entries: FailedJson[]) => entries.map((f) => f.references[0]);

    const since = refs(await listJson('--merchant', merchants.bob.id, '--since', between.toISOString()));
    expect(since).toContain(late.reference);
    expect(since).not.toContain(early.reference);

    const until = refs(await listJson('--merchant', merchants.bob.id, '--until', between.toISOString()));
    expect(until).toContain(early.reference);
    expect(until).not.toContain(late.reference);

    expect(refs(await listJson('--merchant', merchants.bob.id, '--since', '1h'))).toEqual(expect.arrayContaining([early.reference, late.reference]));
    const none = await cli('failed', 'list', '--json', '--merchant', merchants.bob.id, '--until', '1h');
    expect(none.code).toBe(3);
    expect(JSON.parse(none.stdout)).toEqual([]);
  });

  it('hides resolved failures unless --all, which marks them resolved', async () => {
    const failure = await failedEvent(merchants.bob, 'charge.completed');
    modes.set(merchants.bob.id, 'ok');
    expect((await cli('failed', 'resend', failure.reference, '--merchant', merchants.bob.id)).code).toBe(0);

    const hidden = await cli('failed', 'list', '--reference', failure.reference);
    expect(hidden.code).toBe(3);
    expect(hidden.stderr).toContain('no unresolved failed webhook matches');

    const all = await cli('failed', 'list', '--all', '--reference', failure.reference);
    expect(all.code).toBe(0);
    const [header, row] = all.stdout.trimEnd().split('\n');
    expect(header).toContain('RESOLVED');
    expect(row!.slice(header!.indexOf('RESOLVED'), header!.indexOf('RESOLVED') + 3)).toBe('yes');
    expect(await listJson('--all', '--reference', failure.reference)).toEqual([expect.objectContaining({ webhookId: failure.messageId, resolved: true })]);
  });

  it('resends as an operator: the merchant gets the original webhook-id, and the API and a second resend see it resolved', async () => {
    const { message, messageId, reference } = await failedEvent(merchants.alice, 'payout');
    modes.set(merchants.alice.id, 'ok');
    const before = receiverOf(merchants.alice).requests.length;

    const result = await cli('failed', 'resend', reference, '--merchant', merchants.alice.id);

    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe(`resent 1 webhook(s) for reference ${reference} of merchant ${merchants.alice.id}`);
    const [delivered] = (await receiverOf(merchants.alice).waitForRequests(before + 1)).slice(before);
    expect(delivered!.headers['webhook-id']).toBe(messageId);
    expect(delivered!.body).toBe(JSON.stringify({ event: 'payout', data: message.data }));
    expect(await unresolved(api, merchants.alice.id, reference)).toBe(0);

    const again = await cli('failed', 'resend', reference, '--merchant', merchants.alice.id);
    expect(again.code).toBe(3);
    expect(again.stderr).toBe(`webhooks: no unresolved failed webhook for merchant ${merchants.alice.id} and reference ${reference}\n`);
  });

  /** Alice's rows with her webhook changed: the CLI reads them where the programs do. */
  const aliceWith = (change: Record<string, unknown>) => harness.setMerchants([{ ...merchants.alice, endpoints: [{ ...merchants.alice.endpoints[0]!, ...change }] }]);

  it("makes the API's checks: nothing resent while no endpoint is enabled, nor a failure of an event its endpoint no longer receives (exit 1, left failed)", async () => {
    const { reference } = await failedEvent(merchants.alice, 'payout');
    modes.set(merchants.alice.id, 'ok');
    const before = receiverOf(merchants.alice).requests.length;

    await aliceWith({ enabled: false });
    const resend = await cli('failed', 'resend', reference, '--merchant', merchants.alice.id);
    expect({ code: resend.code, stderr: resend.stderr }).toEqual({ code: 1, stderr: `webhooks: no endpoint of merchant ${merchants.alice.id} is enabled (or none is set up); enable one, then resend\n` });
    const replay = await cli('failed', 'replay', '--merchant', merchants.alice.id, '--since', '10m', '--dry-run');
    expect({ code: replay.code, stderr: replay.stderr }).toEqual({ code: 1, stderr: expect.stringContaining(`no endpoint of merchant ${merchants.alice.id} is enabled`) });

    await aliceWith({ events: ['refund.completed'] });
    const unsubscribed = await cli('failed', 'resend', reference, '--merchant', merchants.alice.id);
    expect({ code: unsubscribed.code, stderr: unsubscribed.stderr }).toEqual({ code: 1, stderr: 'webhooks: the endpoints these webhooks failed on no longer receive payout\n' });

    expect(await unresolved(api, merchants.alice.id, reference)).toBe(1);
    // Once the webhook takes it again, the same command resends it.
    await aliceWith({});
    expect((await cli('failed', 'resend', reference, '--merchant', merchants.alice.id)).code).toBe(0);
    await receiverOf(merchants.alice).waitForRequests(before + 1);
  });

  it('exits 3 for a merchant the merchants table does not hold, naming the table', async () => {
    const { reference } = await failedEvent(merchants.bob, 'payout');
    const unknown = await cli('failed', 'resend', reference, '--merchant', 'm_nobody');
    expect({ code: unknown.code, stderr: unknown.stderr }).toEqual({ code: 3, stderr: 'webhooks: no merchant m_nobody in the merchants table (DATABASE_URL)\n' });
    expect(await unresolved(api, merchants.bob.id, reference)).toBe(1);
  });

  it("will not resend another merchant's failure (exit 3) and leaves it failed", async () => {
    const { reference } = await failedEvent(merchants.alice, 'payout');
    const result = await cli('failed', 'resend', reference, '--merchant', merchants.bob.id);
    expect(result.code).toBe(3);
    expect(await unresolved(api, merchants.alice.id, reference)).toBe(1);
  });

  it("replays a merchant's failures of a time window: --dry-run publishes nothing, the real run delivers them all and touches nothing else", async () => {
    const carol = merchants.carol;
    const outside = await failedEvent(carol, 'payout');
    const since = new Date();
    const inWindow = [await failedEvent(carol, 'payout'), await failedEvent(carol, 'charge.completed'), await failedEvent(carol, 'refund.completed')];
    const bobs = await failedEvent(merchants.bob, 'payout');
    const until = new Date();
    const window = ['--merchant', carol.id, '--since', since.toISOString(), '--until', until.toISOString()];

    const dry = await cli('failed', 'replay', ...window, '--dry-run');
    expect(dry.code).toBe(0);
    for (const { reference } of inWindow) expect(dry.stdout).toContain(reference);
    expect(dry.stdout).not.toContain(outside.reference);
    expect(dry.stdout).toContain(`dry run: would resend 3 webhook(s) of merchant ${carol.id}; nothing was published`);
    // Nothing resolved, and nothing reached the merchant before a later event did.
    expect((await listJson('--merchant', carol.id)).map((f) => f.webhookId)).toEqual(
      expect.arrayContaining([outside.messageId, ...inWindow.map((f) => f.messageId)]),
    );
    const sentinel = await failedEvent(carol, 'payout');
    const seenIds = receiverOf(carol).requests.map((r) => r.headers['webhook-id']);
    expect(seenIds).toContain(sentinel.messageId);
    for (const { messageId } of inWindow) expect(seenIds.filter((id) => id === messageId)).toHaveLength(1);

    modes.set(carol.id, 'ok');
    const before = receiverOf(carol).requests.length;
    const real = await cli('failed', 'replay', ...window);

    expect(real.code).toBe(0);
    expect(real.stdout.trim()).toBe(`replay of merchant ${carol.id}: resent 3, skipped 0, errors 0`);
    expect(real.stderr).toContain('replay: 100% (3/3)');
    const delivered = (await receiverOf(carol).waitForRequests(before + 3)).slice(before).map((r) => r.headers['webhook-id']);
    expect(delivered.sort()).toEqual(inWindow.map((f) => f.messageId).sort());
    const left = await listJson('--merchant', carol.id);
    expect(left.map((f) => f.webhookId).sort()).toEqual([outside.messageId, sentinel.messageId].sort());
    expect((await listJson('--reference', bobs.reference))[0]).toMatchObject({ merchantId: merchants.bob.id, resolved: false });
  });

  it('exits 1, not 3, when the window holds failures but each stays failed: its endpoint was disabled since (the outage\'s auto-disable)', async () => {
    const erin = testMerchant('m_erin', 'https://hooks.example.com/erin');
    const [off, on] = [{ ...erin.endpoints[0]!, id: 'ep_erin_off', enabled: false }, { ...erin.endpoints[0]!, id: 'ep_erin_on' }];
    await harness.setMerchants([{ ...erin, endpoints: [off, on] }]);
    await harness.database.query(
      `INSERT INTO failed_webhooks (merchant_id, webhook_id, endpoint_id, failed_at, event, merchant_refs, reason, attempts, content)
       SELECT 'm_erin', 'evt_erin_' || g, 'ep_erin_off', now() - g * interval '1 s', 'payout', ARRAY['m_erin' || chr(31) || 'PO-ERIN-' || g], 'endpoint-disabled', 3, $1
       FROM generate_series(1, 2) AS g`,
      [JSON.stringify(sampleEvent('payout', 'm_erin'))],
    );

    const result = await cli('failed', 'replay', '--merchant', 'm_erin', '--since', '10m');

    expect(result.code).toBe(1);
    expect(result.stdout.trim()).toBe('replay of merchant m_erin: resent 0, skipped 2, errors 0');
    expect(result.stderr).toContain('endpoint ep_erin_off of merchant m_erin is disabled');
    expect((await listJson('--merchant', 'm_erin')).map((f) => f.webhookId).sort()).toEqual(['evt_erin_1', 'evt_erin_2']);
  });

  it('replays at most --rate webhooks a second: N of them at R a second take at least (N-1)/R seconds', async () => {
    const dave = merchants.dave;
    const failures = [];
    for (let i = 0; i < 6; i++) failures.push(await failedEvent(dave, 'payout'));
    modes.set(dave.id, 'ok');
    const before = receiverOf(dave).requests.length;

    const started = performance.now();
    const result = await cli('failed', 'replay', '--merchant', dave.id, '--since', '10m', '--rate', '5');
    const elapsedMs = performance.now() - started;

    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe(`replay of merchant ${dave.id}: resent 6, skipped 0, errors 0`);
    expect(elapsedMs).toBeGreaterThanOrEqual(1000);
    const requests = (await receiverOf(dave).waitForRequests(before + 6)).slice(before);
    // Spacing is set where the CLI publishes; delivery adds a few milliseconds of jitter either way.
    expect(requests.at(-1)!.at - requests[0]!.at).toBeGreaterThanOrEqual(1000 - 100);
    expect(requests.map((r) => r.headers['webhook-id']).sort()).toEqual(failures.map((f) => f.messageId).sort());
  });

  it('exits 3 when nothing matches, so scripts can tell it from a failure', async () => {
    const list = await cli('failed', 'list', '--merchant', 'm_nobody');
    expect(list.code).toBe(3);
    expect(list.stderr).toBe('webhooks: no unresolved failed webhook matches\n');
    const resend = await cli('failed', 'resend', 'NO-SUCH-REF', '--merchant', merchants.alice.id);
    expect(resend.code).toBe(3);
    const replay = await cli('failed', 'replay', '--merchant', 'm_nobody', '--since', '1h');
    expect(replay.code).toBe(3);
    expect(replay.stderr).toBe('webhooks: no unresolved failed webhook of merchant m_nobody in the window\n');
  });

  it.each([
    [['failed', 'list', '--help'], 'Usage: webhooks failed list'],
    [['failed', 'resend', '-h'], 'Usage: webhooks failed resend <reference> --merchant <id>'],
    [['failed', 'replay', '--help'], 'Usage: webhooks failed replay'],
    [['failed', '--help'], 'Usage: webhooks failed <list|resend|replay>'],
  ])('prints the usage of %j on stdout and exits 0', async (args, usage) => {
    const result = await runCliInProcess({}, args);
    expect(result.code).toBe(0);
    expect(result.stdout.startsWith(usage)).toBe(true);
    expect(result.stderr).toBe('');
  });

  it.each([
    [['failed', 'purge'], "unknown command 'purge'", 'Usage: webhooks failed <list|resend|replay>'],
    [['failed', 'list', '--bogus'], "unknown option '--bogus'", 'Usage: webhooks failed list'],
    [['failed', 'list', '--merchnt', 'm'], "unknown option '--merchnt'\n(Did you mean --merchant?)", 'Usage: webhooks failed list'],
    [['failed', 'list', '--since', '2026-02-30T00:00:00Z'], '--since: 2026-02-30 is not a date', 'Usage: webhooks failed list'],
    [['failed', 'list', '--until', '2026-04-31'], '--until: 2026-04-31 is not a date', 'Usage: webhooks failed list'],
    [['failed', 'replay', '--merchant', 'm', '--since', '2026-05-01T24:30:00Z'], '--since: 24:30:00 is not a time of day', 'Usage: webhooks failed replay'],
    [['failed', 'list', '--since', 'yesterday'], '--since takes an ISO-8601 time', 'Usage: webhooks failed list'],
    [['failed', 'list', '--since', '1h', '--until', '2h'], '--since must be before --until', 'Usage: webhooks failed list'],
    [['failed', 'list', '--limit', '0'], '--limit takes a whole number', 'Usage: webhooks failed list'],
    [['failed', 'resend', '--merchant', 'm'], "missing required argument 'reference'", 'Usage: webhooks failed resend'],
    [['failed', 'resend', 'REF-1'], 'failed resend needs --merchant <id>', 'Usage: webhooks failed resend'],
    [['failed', 'resend', 'a\u0007b', '--merchant', 'm'], 'a reference is 1 to 200 characters without control characters or a lone surrogate', 'Usage: webhooks failed resend'],
    [['failed', 'replay', '--merchant', 'm'], 'failed replay needs --since <time>', 'Usage: webhooks failed replay'],
    [['failed', 'replay', '--merchant', 'm', '--since', '1h', '--rate', '0'], '--rate takes a number', 'Usage: webhooks failed replay'],
  ])('exits 2 with the reason and the command\'s usage for %j', async (args, message, usage) => {
    const result = await runCliInProcess(env, args);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`webhooks: ${message}`);
    expect(result.stderr).toContain(usage);
    expect(result.stdout).toBe('');
  });

  it('lists the commands of the group, exit 2, when no command is given', async () => {
    const result = await runCliInProcess(env, ['failed']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('Usage: webhooks failed <list|resend|replay>');
    expect(result.stderr).toMatch(/list \[options\][\s\S]*resend \[options\] <reference>[\s\S]*replay \[options\]/);
  });

  it('exits 1 with a clear message when dispatch does not exist for a resend, and declares nothing', async () => {
    const absent = uniquePrefix('cli-absent');
    const { reference } = await failedEvent(merchants.alice, 'payout');
    const result = await runCliInProcess({ ...env, TOPOLOGY_PREFIX: absent }, ['failed', 'resend', reference, '--merchant', merchants.alice.id]);
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      `webhooks: ${absent}.dispatch does not exist on this broker: no dispatcher or API has declared the topology of TOPOLOGY_PREFIX=${absent} here\n`,
    );
    expect(await harness.test.messageCount(`${absent}.dispatch`).catch((err: { code?: number }) => err.code)).toBe(404);
    expect(await unresolved(api, merchants.alice.id, reference)).toBe(1);
  });

  it('exits 2 naming DATABASE_URL when it is not set: the failure index is in PostgreSQL', async () => {
    const result = await runCliInProcess({ RABBITMQ_URL: env.RABBITMQ_URL!, TOPOLOGY_PREFIX: env.TOPOLOGY_PREFIX! }, ['failed', 'list']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('DATABASE_URL');
  });
});
