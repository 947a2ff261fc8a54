/**
 * Returns the exact source text of a top-level member of a JSON object, so the webhook relays
 * `data` byte for byte: JSON.parse + JSON.stringify would round 1.10 to 1.1 and corrupt integers
 * above 2^53. The text must already have passed JSON.parse; like JSON.parse, the last duplicate wins.
 */
export function rawMember(json: string, key: string): string | undefined {
  let i = skipWs(json, 0);
  if (json[i] !== '{') return undefined;
  i = skipWs(json, i + 1);
  let found: string | undefined;
  while (i < json.length && json[i] !== '}') {
    const keyEnd = endOfString(json, i);
    const name = JSON.parse(json.slice(i, keyEnd)) as string;
    i = skipWs(json, keyEnd);
    i = skipWs(json, i + 1); // the colon
    const valueEnd = endOfValue(json, i);
    if (name === key) found = json.slice(i, valueEnd);
    i = skipWs(json, valueEnd);
    if (json[i] === ',') i = skipWs(json, i + 1);
  }
  return found;
}

function skipWs(s: string, i: number): number {
  while (i < s.length && (s[i] === ' ' || s[i] === '\n' || s[i] === '\r' || s[i] === '\t')) i++;
  return i;
}

/** i points at an opening quote; returns the index just past the closing quote. */
function endOfString(s: string, i: number): number {
  i++;
  while (i < s.length) {
    const c = s[i];
    if (c === '\\') i += 2;
    else if (c === '"') return i + 1;
    else i++;
  }
  return i;
}

function endOfValue(s: string, i: number): number {
  const c = s[i];
  if (c === '"') return endOfString(s, i);
  if (c === '{' || c === '[') {
    let depth = 0;
    while (i < s.length) {
      const d = s[i];
      if (d === '"') {
        i = endOfString(s, i);
        continue;
      }
      if (d === '{' || d === '[') depth++;
      else if (d === '}' || d === ']') {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    return i;
  }
  // number, true, false, null
  while (i < s.length && !',}] \n\r\t'.includes(s[i]!)) i++;
  return i;
}
