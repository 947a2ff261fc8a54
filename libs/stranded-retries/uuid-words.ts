/**
 * A canonical lowercase UUID as four 32-bit words and back, exactly: schedule ids and copy ids
 * are randomUUID(), and held as 16 bytes in typed arrays instead of 36-character strings (a
 * string and its Map entry cost about 100 bytes on the heap; a million waits made that 100 MB).
 */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Writes the key's words at `at` and returns true, or false when the key is not a canonical UUID. */
export function uuidToWords(key: string, into: Uint32Array, at: number): boolean {
  if (key.length !== 36 || !UUID.test(key)) return false;
  into[at] = parseInt(key.slice(0, 8), 16);
  into[at + 1] = parseInt(key.slice(9, 13) + key.slice(14, 18), 16);
  into[at + 2] = parseInt(key.slice(19, 23) + key.slice(24, 28), 16);
  into[at + 3] = parseInt(key.slice(28, 36), 16);
  return true;
}

const hex8 = (word: number) => word.toString(16).padStart(8, '0');

export function wordsToUuid(from: Uint32Array, at: number): string {
  const a = hex8(from[at]!);
  const b = hex8(from[at + 1]!);
  const c = hex8(from[at + 2]!);
  const d = hex8(from[at + 3]!);
  return `${a}-${b.slice(0, 4)}-${b.slice(4)}-${c.slice(0, 4)}-${c.slice(4)}${d}`;
}
