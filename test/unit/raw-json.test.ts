import { rawMember } from '../../libs/contracts/index.js';

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
