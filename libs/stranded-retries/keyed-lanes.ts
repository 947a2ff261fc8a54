import { uuidToWords, wordsToUuid } from './uuid-words.js';

/**
 * Records held as columns of numbers in typed arrays, in lanes (a retry tier, a kind of arrival),
 * each lane a FIFO in the order records were added, every record found by its key. The retry
 * watch holds one record per waiting webhook: as objects in a Map keyed by 36-character strings
 * that cost about 1,600 bytes with everything around them; here a record is its key's 16 bytes,
 * its columns (8 bytes each) and an 8-byte slot in the key table, with the slack of the arrays.
 *
 * Keys are exact: a canonical UUID is held as its 16 bytes and compared whole (no hash decides
 * anything, it only says where to look); any other key is kept as its string in a Map (resend
 * keys, and keys from older writers). A record's handle changes when its lane is rebuilt: keep
 * keys, not handles, across an await.
 */
export const MAX_LANES = 1024;
const MIN_LANE = 256;
const MIN_TABLE = 1024;
/** Bytes a key held as a string costs (string, Map entry), for bytesHeld(). */
const RAW_KEY_BYTES = 120;
/**
 * A full lane grows by a quarter (plus a little): each record then costs at most 1.25 times its
 * row, and a rebuild, which copies the lane, comes once per quarter of its size added.
 */
const grownCap = (live: number) => Math.max(MIN_LANE, Math.ceil(live * 1.25) + MIN_LANE);

class Lane {
  /** Sequence numbers of the first record still held and of the next one added; a record's row is seq % cap. */
  head = 0;
  tail = 0;
  live = 0;
  keys: Uint32Array;
  alive: Uint8Array;
  cols: Float64Array[];
  /** Keys that are not UUIDs, by seq. */
  raw = new Map<number, string>();

  constructor(
    readonly id: number,
    readonly name: string,
    public cap: number,
    columns: number,
  ) {
    this.keys = new Uint32Array(cap * 4);
    this.alive = new Uint8Array(cap);
    this.cols = Array.from({ length: columns }, () => new Float64Array(cap));
  }
}

export class KeyedLanes {
  private readonly lanes: Lane[] = [];
  private readonly byName = new Map<string, Lane>();
  /** Open addressing over UUID keys: handle + 1, 0 for empty, -1 for a deleted slot. */
  private table = new Float64Array(MIN_TABLE);
  private tableUsed = 0;
  private tableSize = 0;
  private readonly rawKeys = new Map<string, number>();
  private readonly words = new Uint32Array(4);

  constructor(private readonly columns: number) {}

  get size(): number {
    return this.tableSize + this.rawKeys.size;
  }

  /** The lane of that name, made on first use (a tier name is held once, not per record). */
  lane(name: string): number {
    let lane = this.byName.get(name);
    if (!lane) {
      if (this.lanes.length >= MAX_LANES) throw new Error(`more than ${MAX_LANES} lanes`);
      lane = new Lane(this.lanes.length, name, MIN_LANE, this.columns);
      this.lanes.push(lane);
      this.byName.set(name, lane);
    }
    return lane.id;
  }

  laneName(lane: number): string {
    return this.lanes[lane]!.name;
  }

  /** Lanes with the records each holds. */
  counts(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const lane of this.lanes) if (lane.live > 0) counts.set(lane.name, lane.live);
    return counts;
  }

  laneIds(): number[] {
    return this.lanes.map((lane) => lane.id);
  }

  count(lane: number): number {
    return this.lanes[lane]!.live;
  }

  get(key: string): number | undefined {
    if (!uuidToWords(key, this.words, 0)) return this.rawKeys.get(key);
    const slot = this.findSlot(this.words);
    return slot < 0 ? undefined : this.table[slot]! - 1;
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  /** Adds a record at the end of its lane; the key must not be held already. */
  add(laneId: number, key: string, values: readonly number[]): number {
    return this.append(laneId, key, undefined, 0, values);
  }

  /** The same, the key given as UUID words (from a snapshot), or as a string when it is not one. */
  private append(laneId: number, key: string | undefined, words: Uint32Array | undefined, at: number, values: readonly number[]): number {
    const lane = this.lanes[laneId]!;
    if (lane.tail - lane.head >= lane.cap) this.rebuild(lane, grownCap(lane.live));
    const seq = lane.tail++;
    const row = seq % lane.cap;
    const handle = seq * MAX_LANES + laneId;
    if (key === undefined) {
      lane.keys.set(words!.subarray(at, at + 4), row * 4);
      this.insertSlot(lane.keys, row * 4, handle);
    } else if (uuidToWords(key, lane.keys, row * 4)) {
      this.insertSlot(lane.keys, row * 4, handle);
    } else {
      lane.keys.fill(0, row * 4, row * 4 + 4);
      lane.raw.set(seq, key);
      this.rawKeys.set(key, handle);
    }
    lane.alive[row] = 1;
    for (let c = 0; c < this.columns; c++) lane.cols[c]![row] = values[c] ?? NaN;
    lane.live++;
    return handle;
  }

  delete(handle: number): void {
    const lane = this.lanes[handle % MAX_LANES]!;
    const seq = Math.floor(handle / MAX_LANES);
    const row = seq % lane.cap;
    if (seq < lane.head || seq >= lane.tail || !lane.alive[row]) return;
    const raw = lane.raw.get(seq);
    if (raw !== undefined) {
      lane.raw.delete(seq);
      this.rawKeys.delete(raw);
    } else {
      const slot = this.findSlot(lane.keys, row * 4);
      if (slot >= 0) {
        this.table[slot] = -1;
        this.tableSize--;
      }
    }
    lane.alive[row] = 0;
    lane.live--;
    while (lane.head < lane.tail && !lane.alive[lane.head % lane.cap]) lane.head++;
    // Drained after a burst: give the memory back.
    if (lane.cap > MIN_LANE * 4 && lane.live < lane.cap / 8) this.rebuild(lane, grownCap(lane.live));
    if (this.table.length > MIN_TABLE && this.tableSize < this.table.length / 16) this.rehash();
  }

  /** The lane's records in order: keys as words (zero for a key kept as a string, listed in `raw` by index), and columns. */
  exportLane(laneId: number): { keys: Uint32Array; columns: Float64Array[]; raw: Array<[number, string]> } {
    const live = this.lanes[laneId]!.live;
    const buffer = new ArrayBuffer(this.laneBytes(laneId));
    const raw = this.writeLane(laneId, buffer, 0);
    const columns = Array.from({ length: this.columns }, (_, c) => new Float64Array(buffer, live * 16 + c * live * 8, live));
    return { keys: new Uint32Array(buffer, 0, live * 4), columns, raw };
  }

  /** Bytes writeLane writes: 16 per key and 8 per column, per record. */
  laneBytes(laneId: number): number {
    return this.lanes[laneId]!.live * (16 + 8 * this.columns);
  }

  /**
   * The same as exportLane, written into `into` at `at` (keys, then each column; `at` a multiple
   * of 8), so a snapshot of a million records is not built twice in memory. Returns the raw keys.
   */
  writeLane(laneId: number, into: ArrayBuffer, at: number): Array<[number, string]> {
    const lane = this.lanes[laneId]!;
    const keys = new Uint32Array(into, at, lane.live * 4);
    const columns = lane.cols.map((_, c) => new Float64Array(into, at + lane.live * 16 + c * lane.live * 8, lane.live));
    const raw: Array<[number, string]> = [];
    let i = 0;
    for (let seq = lane.head; seq < lane.tail; seq++) {
      const row = seq % lane.cap;
      if (!lane.alive[row]) continue;
      const rawKey = lane.raw.get(seq);
      if (rawKey !== undefined) raw.push([i, rawKey]);
      else keys.set(lane.keys.subarray(row * 4, row * 4 + 4), i * 4);
      for (let c = 0; c < columns.length; c++) columns[c]![i] = lane.cols[c]![row]!;
      i++;
    }
    return raw;
  }

  /** Records as exportLane gave them, added in order; a key already held is left as it is. */
  importLane(laneId: number, keys: Uint32Array, columns: Float64Array[], raw: ReadonlyMap<number, string>): void {
    const count = keys.length / 4;
    // Sized once for all of them: growing a quarter at a time would copy a million records many times over.
    const lane = this.lanes[laneId]!;
    if (lane.tail - lane.head + count > lane.cap) this.rebuild(lane, grownCap(lane.live + count));
    if (this.tableUsed + count > this.table.length * 0.75) this.rehash(this.tableSize + count);
    const values = new Array<number>(this.columns).fill(NaN);
    for (let i = 0; i < count; i++) {
      for (let c = 0; c < this.columns; c++) values[c] = columns[c]?.[i] ?? NaN;
      const rawKey = raw.get(i);
      if (rawKey !== undefined) {
        if (!this.rawKeys.has(rawKey)) this.append(laneId, rawKey, undefined, 0, values);
      } else if (this.findSlot(keys, i * 4) < 0) {
        this.append(laneId, undefined, keys, i * 4, values);
      }
    }
  }

  laneOf(handle: number): number {
    return handle % MAX_LANES;
  }

  value(handle: number, column: number): number {
    const lane = this.lanes[handle % MAX_LANES]!;
    return lane.cols[column]![Math.floor(handle / MAX_LANES) % lane.cap]!;
  }

  setValue(handle: number, column: number, value: number): void {
    const lane = this.lanes[handle % MAX_LANES]!;
    lane.cols[column]![Math.floor(handle / MAX_LANES) % lane.cap] = value;
  }

  keyOf(handle: number): string {
    const lane = this.lanes[handle % MAX_LANES]!;
    const seq = Math.floor(handle / MAX_LANES);
    return lane.raw.get(seq) ?? wordsToUuid(lane.keys, (seq % lane.cap) * 4);
  }

  /** The lane's records in the order added, until `visit` returns false. Do not add or delete meanwhile. */
  forEach(laneId: number, visit: (handle: number) => boolean | void): void {
    const lane = this.lanes[laneId]!;
    for (let seq = lane.head; seq < lane.tail; seq++) {
      if (!lane.alive[seq % lane.cap]) continue;
      if (visit(seq * MAX_LANES + laneId) === false) return;
    }
  }

  /** The oldest record of the lane. */
  first(laneId: number): number | undefined {
    const lane = this.lanes[laneId]!;
    return lane.head < lane.tail ? lane.head * MAX_LANES + laneId : undefined;
  }

  clear(): void {
    for (const lane of this.lanes) this.rebuild(lane, MIN_LANE, true);
    this.rawKeys.clear();
    this.table = new Float64Array(MIN_TABLE);
    this.tableUsed = 0;
    this.tableSize = 0;
  }

  /** Bytes these records hold in memory, arrays at their allocated size. */
  bytesHeld(): number {
    let bytes = this.table.byteLength + this.rawKeys.size * RAW_KEY_BYTES;
    for (const lane of this.lanes) bytes += lane.keys.byteLength + lane.alive.byteLength + lane.cols.length * lane.cap * 8;
    return bytes;
  }

  private hash(words: Uint32Array, at: number): number {
    // Random UUIDs are uniform already; mixed anyway for keys that are not.
    let h = Math.imul(words[at]! ^ Math.imul(words[at + 3]!, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 15;
    h = Math.imul(h ^ words[at + 1]! ^ words[at + 2]!, 0xc2b2ae35);
    return (h ^ (h >>> 13)) >>> 0;
  }

  private sameKey(handle: number, words: Uint32Array, at: number): boolean {
    const lane = this.lanes[handle % MAX_LANES]!;
    const row = (Math.floor(handle / MAX_LANES) % lane.cap) * 4;
    const keys = lane.keys;
    return keys[row] === words[at] && keys[row + 1] === words[at + 1] && keys[row + 2] === words[at + 2] && keys[row + 3] === words[at + 3];
  }

  private findSlot(words: Uint32Array, at = 0): number {
    const mask = this.table.length - 1;
    for (let i = this.hash(words, at) & mask; ; i = (i + 1) & mask) {
      const entry = this.table[i]!;
      if (entry === 0) return -1;
      if (entry > 0 && this.sameKey(entry - 1, words, at)) return i;
    }
  }

  private insertSlot(words: Uint32Array, at: number, handle: number): void {
    if (this.tableUsed + 1 > this.table.length * 0.75) this.rehash(this.tableSize + 1);
    const mask = this.table.length - 1;
    for (let i = this.hash(words, at) & mask; ; i = (i + 1) & mask) {
      if (this.table[i]! <= 0) {
        if (this.table[i] === 0) this.tableUsed++;
        this.table[i] = handle + 1;
        this.tableSize++;
        return;
      }
    }
  }

  /** Sized for the keys held at a load of 0.375 to 0.75 (8 to 21 bytes a key); drops deleted slots. */
  private rehash(size = this.tableSize): void {
    let cap = MIN_TABLE;
    while (cap * 0.5 < size) cap *= 2;
    const old = this.table;
    this.table = new Float64Array(cap);
    this.tableUsed = 0;
    this.tableSize = 0;
    for (const entry of old) {
      if (entry <= 0) continue;
      const lane = this.lanes[(entry - 1) % MAX_LANES]!;
      this.insertSlot(lane.keys, (Math.floor((entry - 1) / MAX_LANES) % lane.cap) * 4, entry - 1);
    }
  }

  /**
   * The lane's live records moved to arrays of `cap` rows, packed in order under new sequence
   * numbers (continuing from its tail, so no handle is ever reused), the key table pointed at them.
   */
  private rebuild(lane: Lane, cap: number, empty = false): void {
    const keys = new Uint32Array(cap * 4);
    const alive = new Uint8Array(cap);
    const cols = lane.cols.map(() => new Float64Array(cap));
    const raw = new Map<number, string>();
    // Table slots found first, while every handle in the table still means what it meant.
    const movedSlots = new Int32Array(empty ? 0 : lane.live);
    const movedHandles = new Float64Array(empty ? 0 : lane.live);
    let moved = 0;
    let seq = lane.tail;
    const head = seq;
    if (!empty) {
      for (let old = lane.head; old < lane.tail; old++) {
        const from = old % lane.cap;
        if (!lane.alive[from]) continue;
        const to = seq % cap;
        alive[to] = 1;
        for (let c = 0; c < cols.length; c++) cols[c]![to] = lane.cols[c]![from]!;
        const handle = seq * MAX_LANES + lane.id;
        const rawKey = lane.raw.get(old);
        if (rawKey !== undefined) {
          raw.set(seq, rawKey);
          this.rawKeys.set(rawKey, handle);
        } else {
          keys.set(lane.keys.subarray(from * 4, from * 4 + 4), to * 4);
          const slot = this.findSlot(lane.keys, from * 4);
          if (slot >= 0) {
            movedSlots[moved] = slot;
            movedHandles[moved++] = handle;
          }
        }
        seq++;
      }
    }
    for (let i = 0; i < moved; i++) this.table[movedSlots[i]!] = movedHandles[i]! + 1;
    lane.keys = keys;
    lane.alive = alive;
    lane.cols = cols;
    lane.raw = raw;
    lane.cap = cap;
    lane.head = head;
    lane.tail = seq;
    if (empty) lane.live = 0;
  }
}
