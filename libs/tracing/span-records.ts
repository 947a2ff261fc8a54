import { ATTR } from './attributes.js';

/**
 * Ended spans as they cross from a program's thread to its export worker: each is written, once,
 * as the OTLP/protobuf Span it will be sent as (field 2 of a ScopeSpans: its tag, its length, the
 * message), into an ArrayBuffer that postMessage transfers, not copies. The worker's request is
 * then its envelope and these bytes as they are (otlp-protobuf.ts): re-encoding records into
 * protobuf there cost about 0.7 µs a span, two thirds of the worker's CPU, for bytes the
 * program's thread writes at about the same cost as records of its own. A span's name, kind and
 * constant attributes are encoded once per shape (SpanShape) and copied; attribute keys of ours
 * once per key (KEYS). Fields are written in field number order, as the SDK's serializer writes
 * them. For http/json and tests, readSpanRecords() reads the spans back.
 */

/** A ScopeSpans' `spans` field: what each record starts with. */
const SPAN = 0x12;
/** Span fields (field number << 3 | wire type). */
const TAG = {
  traceId: 0x0a,
  spanId: 0x12,
  traceState: 0x1a,
  parentSpanId: 0x22,
  name: 0x2a,
  kind: 0x30,
  start: 0x39,
  end: 0x41,
  attribute: 0x4a,
  link: 0x6a,
  status: 0x7a,
} as const;
/** Span.flags (field 16, fixed32): its tag, 133, takes two bytes as a varint. */
const FLAGS_KEY = (16 << 3) | 5;
const FLAGS_TAG = [(FLAGS_KEY & 0x7f) | 0x80, FLAGS_KEY >> 7] as const;
const LINK = { traceId: 0x0a, spanId: 0x12, attribute: 0x22, flags: 0x35 } as const;
const KEY_VALUE = { key: 0x0a, value: 0x12 } as const;
const ANY = { string: 0x0a, bool: 0x10, int: 0x18, double: 0x21, array: 0x2a } as const;
const ARRAY_VALUES = 0x0a;
const STATUS = { message: 0x12, code: 0x18 } as const;
/** Span.flags and Link.flags: the W3C flags, plus whether the parent's remoteness is known and whether it is remote. */
export const HAS_IS_REMOTE = 0x100;
export const IS_REMOTE = 0x200;

/** A trace id as four 32-bit words, big-endian order, each signed or not (written modulo 2³²). */
export interface TraceWords {
  readonly w0: number;
  readonly w1: number;
  readonly w2: number;
  readonly w3: number;
}

/** Attributes as spans of ours carry them. */
export type SpanAttributes = Record<string, string | number | boolean>;

/** A span's name and kind, and the attributes every span of that shape has, encoded once. */
export interface SpanShape {
  name: string;
  /** The name and kind fields. */
  head: Uint8Array;
  /** The constant attributes, as Span.attributes fields. */
  constants: Uint8Array;
}

/** Attribute keys whose KeyValue.key field is encoded once: keyCode() gives their index. */
const KEYS: readonly string[] = [...new Set([...Object.values(ATTR), 'db.system.name', 'db.operation.name', 'db.operation.batch.size'])];
const KEY_CODES = new Map(KEYS.map((key, code) => [key, code]));

/** A key as spans keep it until they end: its KEYS index, or the key itself. */
export function keyCode(key: string): string | number {
  return KEY_CODES.get(key) ?? key;
}

/** Each ATTR key's code, for the dispatcher's spans: a delivery would otherwise look up eight keys by name. */
export const ATTR_CODE = Object.fromEntries(Object.entries(ATTR).map(([name, key]) => [name, KEY_CODES.get(key)!])) as { readonly [K in keyof typeof ATTR]: number };

/** Hex digit values by character code. */
const HEX = new Uint8Array(128);
for (let i = 0; i < 16; i++) {
  HEX['0123456789abcdef'.charCodeAt(i)] = i;
  HEX['0123456789ABCDEF'.charCodeAt(i)] = i;
}

/** Writes `size` bytes from their hex at `pos`; returns the position after them. */
function hexInto(bytes: Uint8Array, pos: number, hex: string, size: number): number {
  for (let i = 0; i < 2 * size; i += 2) bytes[pos++] = (HEX[hex.charCodeAt(i)]! << 4) | HEX[hex.charCodeAt(i + 1)]!;
  return pos;
}

const utf8 = new TextEncoder();

/** How many bytes `value` takes as a protobuf varint. */
export function varintSize(value: number): number {
  let size = 1;
  for (let rest = value; rest > 0x7f; rest = Math.floor(rest / 128)) size++;
  return size;
}

/** Writes `value` as a varint at `pos`; where the next byte goes. */
export function writeVarint(bytes: Uint8Array, pos: number, value: number): number {
  while (value > 0x7f) {
    bytes[pos++] = (value & 0x7f) | 0x80;
    value = Math.floor(value / 128);
  }
  bytes[pos++] = value;
  return pos;
}
const MAX_INT64 = 2 ** 63;

/**
 * The program's side: appends ended spans to a buffer that take() hands over whole. Each write
 * makes room for itself, so a span of any size fits; the buffer starts at `size` bytes.
 */
export class SpanWriter {
  private buffer: ArrayBuffer;
  private bytes: Uint8Array;
  private view: DataView;
  private pos = 0;
  /** Spans written since the last take(). */
  spans = 0;

  /** `reuse` gives back a buffer the worker is done with, when it has one (a new one costs page faults). */
  constructor(
    private readonly size = 64 * 1024,
    private readonly reuse: () => ArrayBuffer | undefined = () => undefined,
  ) {
    this.buffer = new ArrayBuffer(size);
    this.bytes = new Uint8Array(this.buffer);
    this.view = new DataView(this.buffer);
  }

  /** What has been written since the last take(), as a buffer of its own to transfer; the writer starts a new one. */
  take(): SpanBatch {
    const batch = { spans: this.spans, buffer: this.buffer, length: this.pos };
    this.buffer = this.reuse() ?? new ArrayBuffer(this.size);
    this.bytes = new Uint8Array(this.buffer);
    this.view = new DataView(this.buffer);
    this.pos = 0;
    this.spans = 0;
    return batch;
  }

  /** A copy of what was written, for bytes encoded once (a shape's, a key's). */
  copy(): Uint8Array {
    return this.bytes.slice(0, this.pos);
  }

  private room(bytes: number): void {
    if (this.pos + bytes <= this.bytes.length) return;
    const bigger = new ArrayBuffer(Math.max(2 * this.bytes.length, this.pos + bytes));
    const copy = new Uint8Array(bigger);
    copy.set(this.bytes.subarray(0, this.pos));
    this.buffer = bigger;
    this.bytes = copy;
    this.view = new DataView(bigger);
  }

  /** Starts a span's record: its tag and two bytes set aside for its length (128 bytes to 16 KiB), returned to endSpan(). */
  beginSpan(): number {
    return this.open(SPAN, 2);
  }

  endSpan(at: number): void {
    this.close(at, 2);
  }

  /** A span's trace id field from its four words, and its span id field from two. */
  ids(trace: TraceWords, high: number, low: number): void {
    this.room(28);
    const bytes = this.bytes;
    const view = this.view;
    const pos = this.pos;
    bytes[pos] = TAG.traceId;
    bytes[pos + 1] = 16;
    view.setInt32(pos + 2, trace.w0, false);
    view.setInt32(pos + 6, trace.w1, false);
    view.setInt32(pos + 10, trace.w2, false);
    view.setInt32(pos + 14, trace.w3, false);
    this.pos = pos + 18;
    this.idField(TAG.spanId, high, low);
  }

  /** The same from hex ids (an SDK span's). */
  hexIds(traceId: string, spanId: string): void {
    this.hexField(TAG.traceId, traceId, 16);
    this.hexField(TAG.spanId, spanId, 8);
  }

  /** The trace state field, when there is one. */
  traceState(value: string): void {
    if (value !== '') this.string(TAG.traceState, value);
  }

  /** The parent span id field from its two halves; none for a root (zeros). */
  parent(high: number, low: number): void {
    if (high !== 0 || low !== 0) this.idField(TAG.parentSpanId, high, low);
  }

  /** The parent span id field from hex; none for a root. */
  parentHex(spanId: string | undefined): void {
    if (spanId !== undefined) this.hexField(TAG.parentSpanId, spanId, 8);
  }

  /** The start and end fields from epoch milliseconds. */
  times(startMs: number, endMs: number): void {
    this.time(TAG.start, startMs);
    this.time(TAG.end, endMs);
  }

  /** The same from the SDK's [seconds, nanoseconds], exactly. */
  hrTimes(start: readonly [number, number], end: readonly [number, number]): void {
    this.timeHr(TAG.start, start[0], start[1]);
    this.timeHr(TAG.end, end[0], end[1]);
  }

  /** An 8-byte id field (a span id, a parent's) from its two halves. */
  private idField(tag: number, high: number, low: number): void {
    this.room(10);
    this.bytes[this.pos] = tag;
    this.bytes[this.pos + 1] = 8;
    this.view.setInt32(this.pos + 2, high, false);
    this.view.setInt32(this.pos + 6, low, false);
    this.pos += 10;
  }

  /** A bytes field from a hex id of `size` bytes; an id of another length (none) writes nothing. */
  private hexField(tag: number, hex: string, size: number): void {
    if (hex.length !== 2 * size) return;
    this.room(2 + size);
    this.bytes[this.pos++] = tag;
    this.bytes[this.pos++] = size;
    this.hex(hex, size);
  }

  private hex(hex: string, size: number): void {
    this.pos = hexInto(this.bytes, this.pos, hex, size);
  }

  /** Bytes encoded once (a shape's fields, a key). */
  raw(bytes: Uint8Array): void {
    const n = bytes.length;
    this.room(n);
    const buf = this.bytes;
    if (n > 64) buf.set(bytes, this.pos);
    else for (let i = 0; i < n; i++) buf[this.pos + i] = bytes[i]!;
    this.pos += n;
  }

  /** A fixed64 time field in nanoseconds from epoch milliseconds. */
  private time(tag: number, ms: number): void {
    const seconds = Math.floor(ms / 1_000);
    this.timeHr(tag, seconds, Math.round((ms - seconds * 1_000) * 1e6));
  }

  /**
   * A fixed64 time field from seconds and nanoseconds, in exact integer steps without a BigInt:
   * seconds × 10⁹ is (seconds × 1,953,125) × 2⁹, whose first factor stays below 2⁵³.
   */
  private timeHr(tag: number, seconds: number, nanos: number): void {
    const m = seconds * 1_953_125;
    const mHigh = Math.floor(m / 2 ** 23);
    let low = (m - mHigh * 2 ** 23) * 512 + nanos;
    let high = mHigh;
    if (low >= 2 ** 32) {
      low -= 2 ** 32;
      high++;
    }
    this.room(9);
    this.bytes[this.pos] = tag;
    this.view.setUint32(this.pos + 1, low, true);
    this.view.setUint32(this.pos + 5, high, true);
    this.pos += 9;
  }

  /** The status field (its message when there is one, its code), then the flags field: what ends every span. */
  statusAndFlags(code: number, message: string, flags: number): void {
    const status = this.open(TAG.status);
    if (message !== '') this.string(STATUS.message, message);
    this.room(2);
    this.bytes[this.pos++] = STATUS.code;
    this.bytes[this.pos++] = code;
    this.close(status);
    this.room(6);
    const bytes = this.bytes;
    bytes[this.pos] = FLAGS_TAG[0];
    bytes[this.pos + 1] = FLAGS_TAG[1];
    this.view.setUint32(this.pos + 2, flags, true);
    this.pos += 6;
  }

  private varint(value: number): void {
    this.room(10);
    this.pos = writeVarint(this.bytes, this.pos, value);
  }

  /**
   * Opens a length-delimited field with `reserved` bytes for its length, written by close(): one
   * for an attribute (under 128 bytes), two for a span, so that their bytes seldom move.
   */
  private open(tag: number, reserved = 1): number {
    this.room(1 + reserved);
    this.bytes[this.pos++] = tag;
    const at = this.pos;
    this.pos += reserved;
    return at;
  }

  /** Writes the length of what follows the `reserved` bytes at `at`, moving it when the length takes another number of bytes. */
  private close(at: number, reserved = 1): void {
    const length = this.pos - at - reserved;
    if (length < 0x80 && reserved === 1) {
      this.bytes[at] = length;
      return;
    }
    const size = varintSize(length);
    if (size !== reserved) {
      if (size > reserved) this.room(size - reserved);
      this.bytes.copyWithin(at + size, at + reserved, this.pos);
      this.pos += size - reserved;
    }
    writeVarint(this.bytes, at, length);
  }

  /** A string field, UTF-8. */
  string(tag: number, value: string): void {
    const n = value.length;
    // Its length in one byte when it fits; a longer one moves its bytes once, in close().
    const reserved = n < 0x80 ? 1 : 2;
    const at = this.open(tag, reserved);
    this.room(3 * n);
    const bytes = this.bytes;
    let pos = this.pos;
    // Most of what spans say is ASCII, copied by hand: faster than encodeInto for short strings.
    let i = 0;
    for (; i < n; i++) {
      const code = value.charCodeAt(i);
      if (code > 0x7f) break;
      bytes[pos++] = code;
    }
    if (i < n) pos += utf8.encodeInto(i === 0 ? value : value.slice(i), bytes.subarray(pos)).written;
    this.pos = pos;
    this.close(at, reserved);
  }

  /** A KeyValue field (a span's attribute, tag 9; a link's, tag 4): a key from keyCode(), or a key of someone else's. */
  attribute(key: string | number, value: unknown, tag: number = TAG.attribute): void {
    // Most attributes are a key of ours and a short ASCII string or a small integer: their
    // lengths are known before their bytes, so they are written in one pass.
    if (typeof key === 'number') {
      if (typeof value === 'string' ? this.shortString(tag, KEY_BYTES[key]!, value) : typeof value === 'number' && this.smallInt(tag, KEY_BYTES[key]!, value)) return;
    }
    const at = this.open(tag);
    if (typeof key === 'number') this.raw(KEY_BYTES[key]!);
    else this.string(KEY_VALUE.key, key);
    const inner = this.open(KEY_VALUE.value);
    this.anyValue(value);
    this.close(inner);
    this.close(at);
  }

  /** A KeyValue of a short ASCII string, when it is one (else nothing is written). */
  private shortString(tag: number, key: Uint8Array, value: string): boolean {
    const k = key.length;
    const n = value.length;
    // KeyValue: tag, length, key, value tag, length, AnyValue: string tag, length, the string; every length one byte.
    if (k + n + 4 > 0x7f) return false;
    this.room(k + n + 6);
    const bytes = this.bytes;
    let pos = this.pos + 2;
    for (let i = 0; i < k; i++) bytes[pos++] = key[i]!;
    const text = pos + 4;
    for (let i = 0; i < n; i++) {
      const code = value.charCodeAt(i);
      if (code > 0x7f) return false;
      bytes[text + i] = code;
    }
    bytes[this.pos] = tag;
    bytes[this.pos + 1] = k + n + 4;
    bytes[pos] = KEY_VALUE.value;
    bytes[pos + 1] = n + 2;
    bytes[pos + 2] = ANY.string;
    bytes[pos + 3] = n;
    this.pos = text + n;
    return true;
  }

  /** A KeyValue of an integer from 0 to 2²¹ (a status code, a port, an attempt), when it is one. */
  private smallInt(tag: number, key: Uint8Array, value: number): boolean {
    if (!(value >= 0 && value < 0x20_0000 && Number.isInteger(value))) return false;
    const k = key.length;
    const size = varintSize(value);
    this.room(k + size + 5);
    const bytes = this.bytes;
    bytes[this.pos] = tag;
    bytes[this.pos + 1] = k + size + 3;
    let pos = this.pos + 2;
    for (let i = 0; i < k; i++) bytes[pos++] = key[i]!;
    bytes[pos++] = KEY_VALUE.value;
    bytes[pos++] = size + 1;
    bytes[pos++] = ANY.int;
    this.pos = writeVarint(bytes, pos, value);
    return true;
  }

  /** An AnyValue as the SDK writes it: strings, booleans, integers as int64, other numbers as doubles, arrays; nothing for null. */
  private anyValue(value: unknown): void {
    if (typeof value === 'string') this.string(ANY.string, value);
    else if (typeof value === 'number') {
      if (Number.isInteger(value) && value >= 0 && value < MAX_INT64) {
        this.u8(ANY.int);
        this.varint(value);
      } else if (Number.isInteger(value) && value >= -MAX_INT64 && value < 0) {
        // Two's complement over 64 bits: ten bytes.
        this.u8(ANY.int);
        this.room(10);
        let rest = BigInt.asUintN(64, BigInt(value));
        while (rest > 0x7fn) {
          this.bytes[this.pos++] = Number(rest & 0x7fn) | 0x80;
          rest >>= 7n;
        }
        this.bytes[this.pos++] = Number(rest);
      } else {
        this.room(9);
        this.bytes[this.pos] = ANY.double;
        this.view.setFloat64(this.pos + 1, value, true);
        this.pos += 9;
      }
    } else if (typeof value === 'boolean') {
      this.u8(ANY.bool);
      this.u8(value ? 1 : 0);
    } else if (Array.isArray(value)) {
      const array = this.open(ANY.array);
      for (const item of value) {
        const at = this.open(ARRAY_VALUES);
        if (item !== null && item !== undefined) this.anyValue(item);
        this.close(at);
      }
      this.close(array);
    }
  }

  private u8(value: number): void {
    this.room(1);
    this.bytes[this.pos++] = value;
  }

  /** Attributes given as an object (a span of the SDK's, a link's, a shape's constants). */
  attributes(attributes: Record<string, unknown> | undefined, tag: number = TAG.attribute): void {
    for (const key in attributes) {
      const value = attributes[key];
      if (value !== undefined) this.attribute(keyCode(key), value, tag);
    }
  }

  /** A link to another trace's span (its remote flags set, as the SDK's serializer sets them). */
  link(traceId: string, spanId: string, attributes: Record<string, unknown> | undefined): void {
    const at = this.open(TAG.link);
    this.hexField(LINK.traceId, traceId, 16);
    this.hexField(LINK.spanId, spanId, 8);
    this.attributes(attributes, LINK.attribute);
    this.room(5);
    this.bytes[this.pos] = LINK.flags;
    this.view.setUint32(this.pos + 1, 1 | HAS_IS_REMOTE | IS_REMOTE, true);
    this.pos += 5;
    this.close(at);
  }

  /** A span's name and kind fields, from an SDK span (its kind is the API's, which starts at INTERNAL = 0; OTLP's at UNSPECIFIED = 0). */
  nameAndKind(name: string, kind: number): void {
    this.string(TAG.name, name);
    this.u8(TAG.kind);
    this.u8(kind + 1);
  }
}

/** KeyValue.key fields by KEYS index. */
const KEY_BYTES: readonly Uint8Array[] = KEYS.map((key) => {
  const w = new SpanWriter(64);
  w.string(KEY_VALUE.key, key);
  return w.copy();
});

/** Attributes as Span.attributes fields, for those that are the same for many spans (an endpoint's URL): written with ExplicitSpan.setEncoded(). */
export function encodeAttributes(attributes: SpanAttributes): Uint8Array {
  const w = new SpanWriter(256);
  w.attributes(attributes);
  return w.copy();
}

/** A shape's fields, encoded (once per shape: SpanChannel keeps them). */
export function encodeShape(name: string, kind: number, attributes: SpanAttributes = {}): SpanShape {
  const head = new SpanWriter(256);
  head.nameAndKind(name, kind);
  return { name, head: head.copy(), constants: encodeAttributes(attributes) };
}

/** A batch as it crosses to the worker: `buffer` is transferred, its first `length` bytes written. */
export interface SpanBatch {
  spans: number;
  buffer: ArrayBuffer;
  length: number;
}

export interface SpanLink {
  traceId: string;
  spanId: string;
  attributes: Record<string, unknown>;
}

/** One span read back from the records (for http/json and tests). */
export interface RecordedSpan {
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  /** W3C trace flags. */
  flags: number;
  remoteParent: boolean;
  traceState: string;
  startMs: number;
  endMs: number;
  /** The same times as the SDK keeps them, [seconds, nanoseconds], exactly as sent. */
  startTime: [number, number];
  endTime: [number, number];
  statusCode: number;
  statusMessage: string;
  attributes: Record<string, unknown>;
  links: SpanLink[];
}

/** Reads protobuf fields: what readSpanRecords() needs of the wire format. */
class Reader {
  pos: number;

  constructor(
    readonly bytes: Uint8Array,
    start: number,
    readonly end: number,
  ) {
    this.pos = start;
  }

  get done(): boolean {
    return this.pos >= this.end;
  }

  varint(): bigint {
    let value = 0n;
    let shift = 0n;
    for (;;) {
      const byte = this.bytes[this.pos++]!;
      value |= BigInt(byte & 0x7f) << shift;
      shift += 7n;
      if (byte < 0x80) return value;
    }
  }

  /** A length-delimited field's body as a reader of its own, moving past it. */
  inner(): Reader {
    const length = Number(this.varint());
    const start = this.pos;
    this.pos += length;
    return new Reader(this.bytes, start, start + length);
  }

  fixed(size: 4 | 8): bigint {
    let value = 0n;
    for (let i = size - 1; i >= 0; i--) value = (value << 8n) | BigInt(this.bytes[this.pos + i]!);
    this.pos += size;
    return value;
  }

  skip(wire: number): void {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 5) this.pos += 4;
    else if (wire === 2) this.inner();
    else throw new Error(`span records: wire type ${wire}`);
  }

  text(): string {
    return Buffer.from(this.bytes.buffer, this.bytes.byteOffset + this.pos, this.end - this.pos).toString('utf8');
  }

  hex(): string {
    return Buffer.from(this.bytes.buffer, this.bytes.byteOffset + this.pos, this.end - this.pos).toString('hex');
  }
}

function readAnyValue(r: Reader): unknown {
  let value: unknown = null;
  while (!r.done) {
    const key = Number(r.varint());
    if (key === ANY.string) value = r.inner().text();
    else if (key === ANY.bool) value = r.varint() !== 0n;
    else if (key === ANY.int) value = Number(BigInt.asIntN(64, r.varint()));
    else if (key === ANY.double) {
      value = new DataView(r.bytes.buffer, r.bytes.byteOffset + r.pos, 8).getFloat64(0, true);
      r.pos += 8;
    } else if (key === ANY.array) {
      const items: unknown[] = [];
      const array = r.inner();
      while (!array.done) {
        if (Number(array.varint()) === ARRAY_VALUES) items.push(readAnyValue(array.inner()));
      }
      value = items;
    } else r.skip(key & 7);
  }
  return value;
}

function readKeyValue(r: Reader, into: Record<string, unknown>): void {
  let key = '';
  let value: unknown = null;
  while (!r.done) {
    const tag = Number(r.varint());
    if (tag === KEY_VALUE.key) key = r.inner().text();
    else if (tag === KEY_VALUE.value) value = readAnyValue(r.inner());
    else r.skip(tag & 7);
  }
  into[key] = value;
}

/** [seconds, nanoseconds] from fixed64 nanoseconds. */
function hrTime(nanos: bigint): [number, number] {
  return [Number(nanos / 1_000_000_000n), Number(nanos % 1_000_000_000n)];
}

const millis = (time: [number, number]): number => time[0] * 1_000 + time[1] / 1e6;

function readSpan(r: Reader): RecordedSpan {
  const span: RecordedSpan = {
    name: '',
    kind: 0,
    traceId: '',
    spanId: '',
    parentSpanId: '',
    flags: 0,
    remoteParent: false,
    traceState: '',
    startMs: 0,
    endMs: 0,
    startTime: [0, 0],
    endTime: [0, 0],
    statusCode: 0,
    statusMessage: '',
    attributes: {},
    links: [],
  };
  while (!r.done) {
    const tag = Number(r.varint());
    if (tag === TAG.traceId) span.traceId = r.inner().hex();
    else if (tag === TAG.spanId) span.spanId = r.inner().hex();
    else if (tag === TAG.traceState) span.traceState = r.inner().text();
    else if (tag === TAG.parentSpanId) span.parentSpanId = r.inner().hex();
    else if (tag === TAG.name) span.name = r.inner().text();
    else if (tag === TAG.kind) span.kind = Number(r.varint()) - 1;
    else if (tag === TAG.start) span.startMs = millis((span.startTime = hrTime(r.fixed(8))));
    else if (tag === TAG.end) span.endMs = millis((span.endTime = hrTime(r.fixed(8))));
    else if (tag === TAG.attribute) readKeyValue(r.inner(), span.attributes);
    else if (tag === TAG.link) {
      const link: SpanLink = { traceId: '', spanId: '', attributes: {} };
      const l = r.inner();
      while (!l.done) {
        const field = Number(l.varint());
        if (field === LINK.traceId) link.traceId = l.inner().hex();
        else if (field === LINK.spanId) link.spanId = l.inner().hex();
        else if (field === LINK.attribute) readKeyValue(l.inner(), link.attributes);
        else l.skip(field & 7);
      }
      span.links.push(link);
    } else if (tag === TAG.status) {
      const s = r.inner();
      while (!s.done) {
        const field = Number(s.varint());
        if (field === STATUS.message) span.statusMessage = s.inner().text();
        else if (field === STATUS.code) span.statusCode = Number(s.varint());
        else s.skip(field & 7);
      }
    } else if (tag === FLAGS_KEY) {
      const flags = Number(r.fixed(4));
      span.flags = flags & 0xff;
      span.remoteParent = (flags & IS_REMOTE) !== 0;
    } else r.skip(tag & 7);
  }
  return span;
}

/** Reads every span of a batch, in order (for http/json and tests; protobuf requests carry the bytes as they are). */
export function readSpanRecords(batch: Uint8Array, each: (span: RecordedSpan) => void): void {
  const r = new Reader(batch, 0, batch.length);
  while (!r.done) {
    const tag = Number(r.varint());
    if (tag !== SPAN) throw new Error(`span records: tag ${tag} where a span was expected`);
    each(readSpan(r.inner()));
  }
}
