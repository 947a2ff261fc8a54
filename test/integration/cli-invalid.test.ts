import { loadDispatcherConfig } from '../../apps/dispatcher/config.js';
import { startDispatcher } from '../../apps/dispatcher/program.js';
import type { InvalidCode } from '../../apps/dispatcher/errors.js';
import { HEADERS, INVALID_CODES, sampleEvent } from '../../libs/contracts/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { brokerUrl, uniquePrefix } from '../support/broker.js';
import { runCliInProcess } from '../support/cli.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { seedMerchants, TEST_SECRETS_KEY } from '../support/merchant-rows.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

// Typechecked: every code the dispatcher can park with is one the CLI knows and lists.
export const dispatcherCodesAreListed: readonly (typeof INVALID_CODES)[number][] = [] as InvalidCode[];

interface ParkedJson {
  code: string;
  reason: string;
  invalidAt: string;
  originalRoutingKey: string;
  messageId: string;
  bodyBytes: number;
  body: string;
}

describe('webhooks invalid (operator CLI on parked messages)', () => {
  let receiver: Receiver;
  let harness: Harness;
  let env: Record<string, string>;
  const known = testMerchant('m_known', 'http://placeholder');
  const late = testMerchant('m_late', 'http://placeholder');
  const lateEvents = [sampleEvent('payout', late.id), sampleEvent('charge.completed', late.id)];
  const bigBody = JSON.stringify({ ...sampleEvent('payout', known.id), padding: 'x'.repeat(70_000) });
  // In the order they are parked: the queue order every listing must keep.
  const parked = [
    { id: 'evt_not_json', body: 'not json {', code: 'not-json' },
    { id: 'evt_envelope', body: '[1,2]', code: 'invalid-envelope' },
    { id: 'evt_late_1', body: JSON.stringify(lateEvents[0]), code: 'unknown-merchant' },
    { id: 'evt_too_large', body: bigBody, code: 'too-large' },
    { id: 'evt_late_2', body: JSON.stringify(lateEvents[1]), code: 'unknown-merchant' },
  ];

  beforeAll(async () => {
    receiver = await Receiver.start(() => 200);
    known.endpoints[0]!.url = receiver.url;
    late.endpoints[0]!.url = receiver.url;
    // m_late is not in the directory yet: its events are parked as unknown-merchant.
    harness = await startHarness({ name: 'cli-invalid', merchants: [known], settings: { maxMessageBytes: 64 * 1024 } });
    env = { RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: harness.prefix };
    for (const [i, { id, body }] of parked.entries()) {
      await harness.test.publishRaw(harness.names.dispatch, Buffer.from(body), { messageId: id, headers: { 'x-upstream': 'billing' } });
      await waitFor(`${id} parked`, async () => (await harness.test.messageCount(harness.names.invalid)) === i + 1);
    }
  });

  afterAll(async () => {
    await harness?.close();
    await receiver?.close();
  });

  const cli = (...args: string[]) => runCliInProcess(env, args);
  const invalidCount = () => harness.test.messageCount(harness.names.invalid);

  async function listJson(...args: string[]): Promise<ParkedJson[]> {
    const result = await cli('invalid', 'list', '--json', ...args);
    expect(result.code).toBe(0);
    return JSON.parse(result.stdout) as ParkedJson[];
  }

  it('lists parked messages with code, reason, time, routing key, message id, size and the start of the body', async () => {
    const listed = await listJson();

    expect(listed.map((m) => [m.messageId, m.code])).toEqual(parked.map((p) => [p.id, p.code]));
    expect(listed[0]).toEqual({
      code: 'not-json',
      reason: expect.stringMatching(/^not-json: body is not UTF-8 JSON/),
      invalidAt: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
      originalRoutingKey: harness.names.dispatch,
      messageId: 'evt_not_json',
      bodyBytes: 10,
      body: 'not json {',
    });
    expect(listed[3]).toMatchObject({ code: 'too-large', bodyBytes: Buffer.byteLength(bigBody), body: bigBody.slice(0, 200) });

    const table = await cli('invalid', 'list');
    expect(table.code).toBe(0);
    const [header, ...rows] = table.stdout.trimEnd().split('\n');
    expect(header!.split(/\s{2,}/)).toEqual(['CODE', 'INVALID AT', 'ROUTING KEY', 'MESSAGE ID', 'BYTES', 'REASON', 'BODY']);
    expect(rows).toHaveLength(parked.length);
    expect(rows[2]!.slice(header!.indexOf('MESSAGE ID'))).toMatch(/^evt_late_1\s+\d+\s+unknown-merchant: no merchant m_late/);
    expect(rows[3]!.length).toBeLessThan(header!.indexOf('BODY') + 201);
  });

  it('lists without removing, reordering or redelivering anything, however often it runs', async () => {
    const before = await invalidCount();
    const first = (await listJson()).map((m) => m.messageId);
    for (let run = 0; run < 3; run++) expect((await listJson()).map((m) => m.messageId)).toEqual(first);
    expect(await invalidCount()).toBe(before);
    expect(first).toEqual(parked.map((p) => p.id));
  });

  it('filters by --code, shows at most --limit in queue order, and exits 3 when nothing matches', async () => {
    expect((await listJson('--code', 'unknown-merchant')).map((m) => m.messageId)).toEqual(['evt_late_1', 'evt_late_2']);

    const limited = await cli('invalid', 'list', '--json', '--limit', '2');
    expect(JSON.parse(limited.stdout).map((m: ParkedJson) => m.messageId)).toEqual(['evt_not_json', 'evt_envelope']);
    expect(limited.stderr).toBe(`showing the first 2 of ${parked.length}; raise --limit to see more\n`);

    const none = await cli('invalid', 'list', '--json', '--code', 'internal-error');
    expect(none.code).toBe(3);
    expect(none.stdout.trim()).toBe('[]');
    expect(none.stderr).toBe('webhooks: no parked message has code internal-error\n');
    expect(await invalidCount()).toBe(parked.length);
  });

  it('requeue --dry-run prints what would move and moves nothing', async () => {
    const result = await cli('invalid', 'requeue', '--code', 'unknown-merchant', '--dry-run');

    expect(result.code).toBe(0);
    expect(result.stdout).toContain('evt_late_1');
    expect(result.stdout).toContain('evt_late_2');
    expect(result.stdout).not.toContain('evt_not_json');
    expect(result.stdout).toContain(`dry run: would move 2 message(s) to ${harness.names.dispatch}; nothing was moved`);
    expect((await listJson()).map((m) => m.messageId)).toEqual(parked.map((p) => p.id));
  });

  it('requeue --code moves only matching messages to dispatch, without x-invalid-* headers, and they are delivered once the merchant exists', async () => {
    // Nothing consumes dispatch until the cause is fixed, so the moved messages can be looked at.
    await harness.dispatcher.stop();

    const result = await cli('invalid', 'requeue', '--code', 'unknown-merchant');

    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe(`moved 2 message(s) to ${harness.names.dispatch}; 3 left in ${harness.names.invalid}`);
    expect((await listJson()).map((m) => m.messageId)).toEqual(['evt_not_json', 'evt_envelope', 'evt_too_large']);
    expect(await harness.test.messageCount(harness.names.dispatch)).toBe(2);
    const look = await harness.test.connection.createChannel();
    try {
      for (const [i, event] of lateEvents.entries()) {
        const moved = await look.get(harness.names.dispatch, { noAck: false });
        if (!moved) throw new Error('moved message missing from dispatch');
        expect(moved.properties.messageId).toBe(`evt_late_${i + 1}`);
        expect(moved.content.toString()).toBe(JSON.stringify(event));
        expect(moved.properties.deliveryMode).toBe(2);
        expect(moved.properties.headers).toMatchObject({ 'x-upstream': 'billing', [HEADERS.originalRoutingKey]: harness.names.dispatch });
        expect(Object.keys(moved.properties.headers ?? {}).filter((k) => k.startsWith('x-invalid-'))).toEqual([]);
      }
    } finally {
      await look.close(); // hands both back to dispatch, once
    }

    // The cause fixed: the merchant exists now.
    await seedMerchants(harness.database.url, [late]);
    const fixed = await startDispatcher(
      loadDispatcherConfig({
        RABBITMQ_URL: brokerUrl(),
        TOPOLOGY_PREFIX: harness.prefix,
        DATABASE_URL: harness.database.url,
        SECRETS_KEY: TEST_SECRETS_KEY,
        RETRY_SCHEDULE: '',
        FAILED_RETENTION: '1D',
        ALLOW_PRIVATE_TARGETS: 'true',
        // A free port: the default 9464 may be anyone's on this host (a CI run failed on EADDRINUSE).
        METRICS_PORT: '0',
      }),
      silentLogger(),
    );
    try {
      const delivered = await receiver.waitForRequests(2);
      expect(delivered.map((r) => r.headers['webhook-id']).sort()).toEqual(['evt_late_1', 'evt_late_2']);
      expect(delivered.map((r) => JSON.parse(r.body).data.reference ?? JSON.parse(r.body).data.tnxRef).sort()).toEqual(
        [lateEvents[0]!.data.reference, lateEvents[1]!.data.tnxRef].sort(),
      );
      await waitFor('dispatch drained', async () => (await harness.test.messageCount(harness.names.dispatch)) === 0);
      expect(await invalidCount()).toBe(3);
    } finally {
      await fixed.stop();
    }
  });

  it('requeue exits 3 when no parked message matches, and 2 without exactly one of --code and --all', async () => {
    const none = await cli('invalid', 'requeue', '--code', 'unknown-merchant');
    expect(none.code).toBe(3);
    expect(none.stderr).toBe('webhooks: no parked message has code unknown-merchant\n');

    for (const [args, message] of [
      [[], 'invalid requeue needs --code <code> or --all'],
      [['--code', 'not-json', '--all'], 'give --code <code> or --all, not both'],
    ] as const) {
      const usage = await cli('invalid', 'requeue', ...args);
      expect(usage.code).toBe(2);
      expect(usage.stderr).toContain(`webhooks: ${message}`);
      expect(usage.stderr).toContain('Usage: webhooks invalid requeue');
    }
    expect(await invalidCount()).toBe(3);
  });

  it('leaves what it listed as it was: never redelivered, no delivery count, same order, reason kept', async () => {
    const left = await harness.test.drain(harness.names.invalid, 3);

    expect(left.map((m) => m.properties.messageId)).toEqual(['evt_not_json', 'evt_envelope', 'evt_too_large']);
    for (const message of left) {
      expect(message.fields.redelivered).toBe(false);
      // 3.10 quorum queues report 0 on a first delivery, 4.x leave it out; a return would count 1 or more.
      expect(message.properties.headers?.['x-delivery-count'] ?? 0).toBe(0);
      expect(message.properties.headers).toMatchObject({ 'x-upstream': 'billing', [HEADERS.invalidCode]: expect.any(String) });
    }
    const empty = await cli('invalid', 'list');
    expect(empty.code).toBe(3);
    expect(empty.stderr).toBe(`webhooks: ${harness.names.invalid} is empty\n`);
  });

  it.each([
    [['invalid', 'list', '--help'], 'Usage: webhooks invalid list'],
    [['invalid', 'requeue', '-h'], 'Usage: webhooks invalid requeue'],
    [['invalid', '-h'], 'Usage: webhooks invalid <list|requeue>'],
  ])('prints the usage of %j on stdout and exits 0', async (args, usage) => {
    const result = await runCliInProcess({}, args);
    expect(result.code).toBe(0);
    expect(result.stdout.startsWith(usage)).toBe(true);
    expect(result.stderr).toBe('');
  });

  it('lists every parking code in the --help of list and requeue', async () => {
    for (const command of ['list', 'requeue']) {
      const { stdout } = await runCliInProcess({}, ['invalid', command, '--help']);
      for (const code of INVALID_CODES) expect(stdout).toContain(code);
      expect(stdout).toContain('invalid-message-id');
      expect(stdout).toContain('delivery-limit');
    }
  });

  it('says in --help how it reads the queue without ever requeueing', async () => {
    for (const command of ['list', 'requeue']) {
      const { stdout } = await runCliInProcess({}, ['invalid', command, '--help']);
      expect(stdout).toContain('Nothing is ever returned with a');
      expect(stdout).toContain('delivery-limit');
    }
  });

  it.each([
    [['invalid', 'peek'], "unknown command 'peek'"],
    [['invalid', 'list', '--all'], "unknown option '--all'"],
    [['invalid', 'list', '--cod', 'not-json'], "unknown option '--cod'\n(Did you mean --code?)"],
    [['invalid', 'list', '--limit', 'many'], '--limit takes a whole number'],
    [['invalid', 'list', 'extra'], "too many arguments for 'list'"],
    [
      ['invalid', 'list', '--code', 'bogus'],
      '--code: unknown code "bogus"; the codes are not-json, invalid-envelope, missing-reference, invalid-message-id, too-large, unknown-merchant, internal-error, wait-not-ended, upstream-x-death, delivery-limit',
    ],
    [['invalid', 'requeue', '--code', 'unknown_merchant'], '--code: unknown code "unknown_merchant"; the codes are not-json,'],
  ])('exits 2 with the reason and the usage for %j', async (args, message) => {
    const result = await runCliInProcess(env, args);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`webhooks: ${message}`);
    expect(result.stderr).toContain('Usage: webhooks invalid');
  });

  it('exits 1 with a clear message when the invalid queue does not exist, and declares nothing', async () => {
    const absent = uniquePrefix('cli-absent');
    const result = await runCliInProcess({ ...env, TOPOLOGY_PREFIX: absent }, ['invalid', 'list']);
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      `webhooks: ${absent}.invalid does not exist on this broker: no dispatcher or API has declared the topology of TOPOLOGY_PREFIX=${absent} here\n`,
    );
    expect(await harness.test.messageCount(`${absent}.invalid`).catch((err: { code?: number }) => err.code)).toBe(404);
  });
});
