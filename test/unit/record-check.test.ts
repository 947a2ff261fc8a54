import { randomUUID } from 'node:crypto';
import { decodeRecords, deliveryRecordSchema } from '../../libs/delivery-log/index.js';
import { checkRecord } from '../../libs/delivery-log/record-check.js';

/** The recorder's cheap check may only be stricter than deliveryRecordSchema, and must build the same record. */
describe('checkRecord against deliveryRecordSchema', () => {
  const at = '2026-11-23T10:00:00.123Z';
  const valid = {
    id: randomUUID(), at, webhookId: 'wh_1', merchantId: 'm_1', event: 'charge.completed', references: ['tx_1'],
    payload: JSON.stringify({ event: 'charge.completed', data: { tnxRef: 'tx_1' } }), firstSeenAt: at, outcome: 'retrying', attemptNumber: 1,
    attempt: { startedAt: at, durationMs: 12, httpStatus: 503, error: 'HTTP 503', responseBody: 'Service Unavailable' },
    nextAttemptAt: '2026-11-23T10:00:05+01:00', reason: 'x',
  };
  const times = ['2026-11-23T10:00:00Z', '2026-11-23T10:00:00.123456Z', '2026-11-23T10:00:00-05:30', '2024-02-29T00:00:00Z', '2025-02-29T00:00:00Z',
    '2026-02-30T10:00:00Z', '2026-11-23T24:00:00Z', '2026-11-23T10:00:60Z', '2026-11-23T10:00Z', '2026-11-23T10:00:00+0100', '2026-11-23 10:00:00Z', '', 5];
  const strings = (max: number) => ['', 'a', 'x'.repeat(max), 'x'.repeat(max + 1), 7, null, ['a']];
  const counts = [0, 1, -1, 1.5, 2 ** 53, Number.NaN, '1', null];
  const variants: Array<[string, unknown]> = [
    ...['id', 'at', 'webhookId', 'merchantId', 'event', 'references', 'firstSeenAt', 'outcome', 'attemptNumber', 'payload', 'attempt', 'nextAttemptAt', 'reason']
      .map((key): [string, unknown] => [`without ${key}`, undefined]),
  ];
  const cases: Array<[string, unknown]> = [['valid', valid], ['not an object', 'x'], ['null', null], ['an array', [valid]], ['extra keys', { ...valid, colour: 'blue', attempt: { ...valid.attempt, extra: 1 } }]];
  const withKey = (key: string, value: unknown) => {
    const copy: Record<string, unknown> = { ...valid };
    if (value === undefined) delete copy[key];
    else copy[key] = value;
    return copy;
  };
  for (const [name] of variants) cases.push([name, withKey(name.slice('without '.length), undefined)]);
  for (const id of ['0b3c1a52-9a5e-4c1e-9a86-1a2b3c4d5e6f', '0b3c1a52-9a5e-0c1e-9a86-1a2b3c4d5e6f', '0B3C1A52-9A5E-4C1E-9A86-1A2B3C4D5E6F', '00000000-0000-0000-0000-000000000000', 'nope']) cases.push([`id ${id}`, withKey('id', id)]);
  for (const key of ['at', 'firstSeenAt', 'nextAttemptAt']) for (const t of times) cases.push([`${key} ${t}`, withKey(key, t)]);
  for (const t of times) cases.push([`attempt.startedAt ${t}`, withKey('attempt', { ...valid.attempt, startedAt: t })]);
  for (const [key, max] of [['webhookId', 200], ['merchantId', 200], ['event', 100], ['reason', 200]] as const) for (const s of strings(max)) cases.push([`${key} ${String(s).slice(0, 5)}`, withKey(key, s)]);
  for (const s of strings(1000)) cases.push([`attempt.error ${String(s).slice(0, 5)}`, withKey('attempt', { ...valid.attempt, error: s })]);
  for (const s of [...strings(10), 'x'.repeat(100_000)]) cases.push([`attempt.responseBody ${String(s).slice(0, 5)}`, withKey('attempt', { ...valid.attempt, responseBody: s })]);
  for (const n of counts) cases.push([`attemptNumber ${n}`, withKey('attemptNumber', n)], [`attempt.durationMs ${n}`, withKey('attempt', { ...valid.attempt, durationMs: n })]);
  for (const n of [99, 100, 599, 600, 200.5, '200', null]) cases.push([`attempt.httpStatus ${n}`, withKey('attempt', { ...valid.attempt, httpStatus: n })]);
  for (const a of [null, [], 'x', {}, { startedAt: at, durationMs: 1 }]) cases.push([`attempt ${JSON.stringify(a)}`, withKey('attempt', a)]);
  for (const o of ['delivered', 'invalid', 'lost', '', null]) cases.push([`outcome ${o}`, withKey('outcome', o)]);
  for (const r of [[], ['a', 'b', 'c', 'd'], ['a', 'b', 'c', 'd', 'e'], [''], ['x'.repeat(201)], [1], 'a', null]) cases.push([`references ${JSON.stringify(r).slice(0, 20)}`, withKey('references', r)]);
  for (const p of [null, 0, 'text', [1], { deep: { deeper: [null] } }]) cases.push([`payload ${JSON.stringify(p)}`, withKey('payload', p)]);

  it.each(cases)('agrees with zod: %s', (_name, entry) => {
    // As records arrive: through JSON.
    const input = entry === undefined ? undefined : JSON.parse(JSON.stringify(entry));
    const zod = deliveryRecordSchema.safeParse(input);
    const checked = checkRecord(input);
    if (checked) {
      expect(zod.success).toBe(true);
      expect(checked).toStrictEqual(zod.data);
      expect(JSON.stringify(checked)).toBe(JSON.stringify(zod.data));
    }
    const decoded = decodeRecords(Buffer.from(JSON.stringify([input])));
    expect(decoded.records).toStrictEqual(zod.success ? [zod.data] : []);
    expect(decoded.refused).toHaveLength(zod.success ? 0 : 1);
    if (!zod.success) expect(decoded.refused[0]!.error).toEqual(expect.any(String));
  });

  it('takes the common record without zod', () => {
    expect(checkRecord(JSON.parse(JSON.stringify(valid)))).toBeDefined();
  });

  it('says why a message is refused whole, with its first bytes for the quarantine', () => {
    expect(decodeRecords(Buffer.from('{'))).toEqual({ records: [], positions: [], refused: [{ position: -1, error: 'not JSON', content: '{' }] });
    expect(decodeRecords(Buffer.from('{}'))).toMatchObject({ records: [], refused: [{ position: -1, error: 'not a JSON array', content: '{}' }] });
  });

  it('gives each record its place in the message and each refused entry its own', () => {
    const good = { id: '7d3c1a52-4c1e-4d7b-9d55-2c5a1f0e8b11', at: '2026-11-25T10:00:00Z', webhookId: 'wh', merchantId: 'm', event: 'payout', references: [], firstSeenAt: '2026-11-25T10:00:00Z', outcome: 'delivered', attemptNumber: 1 };
    const decoded = decodeRecords(Buffer.from(JSON.stringify([{ nope: 1 }, good, 'x', good])));
    expect(decoded.positions).toEqual([1, 3]);
    expect(decoded.refused.map((r) => [r.position, r.content])).toEqual([[0, '{"nope":1}'], [2, '"x"']]);
  });
});
