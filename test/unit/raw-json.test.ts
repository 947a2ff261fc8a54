import { messageFromLoggedBody, PLATFORM_MERCHANT_ID, rawMember } from '../../libs/contracts/index.js';

describe('rawMember', () => {
  it('returns the exact text of a member, whitespace inside it kept', () => {
    expect(rawMember('{"a":1, "data" : { "x" : [1, 2.50] } ,"z":true}', 'data')).toBe('{ "x" : [1, 2.50] }');
  });

  it('skips strings containing braces, quotes and escapes before the member', () => {
    const json = '{"note":"} { \\" ] [","data":{"s":"\\"}"}}';
    expect(rawMember(json, 'data')).toBe('{"s":"\\"}"}');
  });

  it('finds a key written with escapes, and takes the last duplicate as JSON.parse does', () => {
    expect(rawMember('{"d\\u0061ta":1,"data":2}', 'data')).toBe('2');
  });

  it('keeps numbers JSON.parse would round', () => {
    expect(rawMember('{"data":12345678901234567890}', 'data')).toBe('12345678901234567890');
    expect(rawMember('{"data":1.10}', 'data')).toBe('1.10');
  });

  it('returns scalars, null and absent members', () => {
    expect(rawMember('{"data":null}', 'data')).toBe('null');
    expect(rawMember('{"data":"text"}', 'data')).toBe('"text"');
    expect(rawMember('{"other":1}', 'data')).toBeUndefined();
    expect(rawMember('[1]', 'data')).toBeUndefined();
  });

  it('agrees with JSON.parse on every member of a nested document', () => {
    const doc = { a: [1, { b: 'x}' }], data: { customer: { id: 1, tags: ['a', '"b"'] }, empty: {} }, z: null };
    const text = JSON.stringify(doc, null, 2);
    for (const key of Object.keys(doc)) {
      expect(JSON.parse(rawMember(text, key)!)).toEqual(doc[key as keyof typeof doc]);
    }
  });
});

describe('messageFromLoggedBody', () => {
  it("wraps a merchant's logged body in upstream's envelope, its data byte for byte", () => {
    const body = '{"data": {"amount": 1.10, "id": 12345678901234567890}, "event": "payout"}';
    expect(messageFromLoggedBody('m_1', 'payout', body)).toBe('{"merchantId":"m_1","event":"payout","data":{"amount": 1.10, "id": 12345678901234567890}}');
  });

  it("gives an operational event's body back as it is: it was sent as published, and a merchantId would make it a merchant's event", () => {
    const body = '{"data": {"merchantId": "m_1"}, "type": "endpoint.disabled", "timestamp": "2026-11-27T10:00:00.000Z"}';
    expect(messageFromLoggedBody(PLATFORM_MERCHANT_ID, 'endpoint.disabled', body)).toBe(body);
  });

  it('has nothing for a body without data', () => {
    expect(messageFromLoggedBody('m_1', 'payout', '{"event":"payout"}')).toBeUndefined();
  });
});
