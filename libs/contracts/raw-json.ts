import { PLATFORM_MERCHANT_ID } from './merchant-id.js';

/** The exact text of a top-level member of parsed JSON, so `data` is relayed byte for byte; the last duplicate wins. */
export function rawMember(json: string, key: string): string | undefined {
  let i = skipWs(json, 0);
  if (json.charCodeAt(i) !== OPEN_BRACE) return undefined;
  i = skipWs(json, i + 1);
  let found: string | undefined;
  while (i < json.length && json.charCodeAt(i) !== CLOSE_BRACE) {
    const keyEnd = endOfString(json, i);
    const raw = json.slice(i + 1, keyEnd - 1);
    const name = raw.includes('\\') ? (JSON.parse(json.slice(i, keyEnd)) as string) : raw;
    i = skipWs(json, keyEnd);
    i = skipWs(json, i + 1); // the colon
    const valueEnd = endOfValue(json, i);
    if (name === key) found = json.slice(i, valueEnd);
    i = skipWs(json, valueEnd);
    if (json.charCodeAt(i) === COMMA) i = skipWs(json, i + 1);
  }
  return found;
}

// Character codes: this scan runs over every webhook body.
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

function isWs(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

function skipWs(s: string, i: number): number {
  while (i < s.length && isWs(s.charCodeAt(i))) i++;
  return i;
}

/** i points at an opening quote; returns the index just past the closing quote. */
function endOfString(s: string, i: number): number {
  i++;
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c === BACKSLASH) i += 2;
    else if (c === QUOTE) return i + 1;
    else i++;
  }
  return i;
}

function endOfValue(s: string, i: number): number {
  const c = s.charCodeAt(i);
  if (c === QUOTE) return endOfString(s, i);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    let depth = 0;
    while (i < s.length) {
      const d = s.charCodeAt(i);
      if (d === QUOTE) {
        i = endOfString(s, i);
        continue;
      }
      if (d === OPEN_BRACE || d === OPEN_BRACKET) depth++;
      else if (d === CLOSE_BRACE || d === CLOSE_BRACKET) {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    return i;
  }
  // number, true, false, null
  while (i < s.length) {
    const d = s.charCodeAt(i);
    if (d === COMMA || d === CLOSE_BRACE || d === CLOSE_BRACKET || isWs(d)) break;
    i++;
  }
  return i;
}

/** The message to put back in `dispatch` for a webhook from the body the delivery log kept; undefined without `data`. */
export function messageFromLoggedBody(merchantId: string, event: string, body: string): string | undefined {
  if (merchantId === PLATFORM_MERCHANT_ID) return body;
  const data = rawMember(body, 'data');
  return data === undefined ? undefined : `{"merchantId":${JSON.stringify(merchantId)},"event":${JSON.stringify(event)},"data":${data}}`;
}
