import { BITS, INLINE, KEY_INLINE, keyName, shapeOf, SpanReader, type SpanShape, STATUS_SHIFT, VALUE } from './span-records.js';

/**
 * An OTLP/protobuf ExportTraceServiceRequest written straight from span records
 * (span-records.ts), without a span object per span: the export worker's encoder. Ids and
 * strings are copied as the records hold them, already bytes. The SDK's serializer needs the
 * SDK's spans, and rebuilding them cost the worker about 25 µs of CPU and most of the process's
 * garbage per span; this writes a span in about one. The SDK's exporter
 * still sends what this writes (export-worker.ts). Field numbers are those of
 * opentelemetry/proto/trace/v1/trace.proto; test/unit/otlp-protobuf.test.ts checks the output
 * against the SDK's own serializer, field by field.
 */
const LEN = 2;
const VARINT = 0;
const I64 = 1;
const I32 = 5;
/** Span.flags: the W3C flags, plus whether the parent's remoteness is known and whether it is remote. */
const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;

class Writer {
  buf: Buffer;
  pos = 0;

  constructor(size = 256) {
    this.buf = Buffer.allocUnsafe(size);
  }

  reserve(bytes: number): void {
    if (this.pos + bytes <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + bytes));
    this.buf.copy(bigger, 0, 0, this.pos);
    this.buf = bigger;
  }

  varint(value: number): void {
    this.reserve(10);
    while (value > 0x7f) {
      this.buf[this.pos++] = (value & 0x7f) | 0x80;
      value = Math.floor(value / 128);
    }
    this.buf[this.pos++] = value;
  }

  tag(field: number, wire: number): void {
    this.varint((field << 3) | wire);
  }

  /**
   * Opens a length-delimited field with `reserved` bytes for its length, written by close(): a
   * span takes two (128 bytes to 16 KiB), a request's outer messages four, so that their bytes
   * seldom move.
   */
  open(field: number, reserved = 1): number {
    this.tag(field, LEN);
    this.reserve(reserved);
    const at = this.pos;
    this.pos += reserved;
    return at;
  }

  /** Writes the length of what follows the `reserved` bytes at `at`, moving it when the length takes another number of bytes. */
  close(at: number, reserved = 1): void {
    const length = this.pos - at - reserved;
    if (length < 0x80 && reserved === 1) {
      this.buf[at] = length;
      return;
    }
    const size = varintSize(length);
    if (size !== reserved) {
      if (size > reserved) this.reserve(size - reserved);
      this.buf.copyWithin(at + size, at + reserved, this.pos);
      this.pos += size - reserved;
    }
    const buf = this.buf;
    let value = length;
    let pos = at;
    while (value > 0x7f) {
      buf[pos++] = (value & 0x7f) | 0x80;
      value = Math.floor(value / 128);
    }
    buf[pos] = value;
  }

  string(field: number, value: string): void {
    const at = this.open(field);
    const n = value.length;
    this.reserve(n * 3);
    const buf = this.buf;
    let pos = this.pos;
    // Most of what spans say is ASCII: copied by hand, which beats Buffer.write for short strings.
    let i = 0;
    for (; i < n; i++) {
      const code = value.charCodeAt(i);
      if (code > 0x7f) break;
      buf[pos++] = code;
    }
    if (i < n) pos += buf.write(value.slice(i), pos, 'utf8');
    this.pos = pos;
    this.close(at);
  }

  /** A length-delimited field copied from `length` bytes of `source` at `at`. */
  copied(field: number, source: Uint8Array, at: number, length: number): void {
    this.tag(field, LEN);
    this.varint(length);
    this.reserve(length);
    const buf = this.buf;
    // Ids and most strings are short: a loop beats a subarray and set().
    if (length <= 64) for (let i = 0; i < length; i++) buf[this.pos + i] = source[at + i]!;
    else buf.set(source.subarray(at, at + length), this.pos);
    this.pos += length;
  }

  /** Bytes encoded once (a shape's name and constant attributes, a key). */
  raw(bytes: Uint8Array): void {
    const n = bytes.length;
    this.reserve(n);
    const buf = this.buf;
    // A shape's attributes are a few hundred bytes: memcpy; a key, a loop.
    if (n > 64) buf.set(bytes, this.pos);
    else for (let i = 0; i < n; i++) buf[this.pos + i] = bytes[i]!;
    this.pos += n;
  }

  /**
   * Epoch milliseconds as fixed64 nanoseconds, in exact integer steps without a BigInt:
   * seconds × 10⁹ is (seconds × 1,953,125) × 2⁹, whose first factor stays below 2⁵³.
   */
  time(field: number, ms: number): void {
    this.tag(field, I64);
    this.reserve(8);
    const seconds = Math.floor(ms / 1_000);
    const nanos = Math.round((ms - seconds * 1_000) * 1e6);
    const m = seconds * 1_953_125;
    const mHigh = Math.floor(m / 2 ** 23);
    let low = (m - mHigh * 2 ** 23) * 512 + nanos;
    let high = mHigh;
    if (low >= 2 ** 32) {
      low -= 2 ** 32;
      high++;
    }
    this.buf.writeUInt32LE(low, this.pos);
    this.buf.writeUInt32LE(high, this.pos + 4);
    this.pos += 8;
  }

  fixed32(field: number, value: number): void {
    this.tag(field, I32);
    this.reserve(4);
    this.buf.writeUInt32LE(value, this.pos);
    this.pos += 4;
  }

  bytes(): Buffer {
    return this.buf.subarray(0, this.pos);
  }
}

function varintSize(value: number): number {
  let size = 1;
  while (value > 0x7f) {
    value = Math.floor(value / 128);
    size++;
  }
  return size;
}

const MAX_INT64 = 2 ** 63;

/** AnyValue, as the SDK writes it: strings, booleans, integers as int64, other numbers as doubles, arrays. */
function anyValue(w: Writer, value: unknown): void {
  if (typeof value === 'string') w.string(1, value);
  else if (typeof value === 'boolean') boolValue(w, value);
  else if (typeof value === 'number') numberValue(w, value);
  else if (Array.isArray(value)) {
    const array = w.open(5);
    for (const item of value) {
      const at = w.open(1);
      if (item !== null && item !== undefined) anyValue(w, item);
      w.close(at);
    }
    w.close(array);
  }
}

/** anyValue() of a value as the records hold it (span-records.ts VALUE). */
function recordedValue(w: Writer, r: SpanReader): void {
  const tag = r.u8();
  if (tag === VALUE.string) {
    const { at, length } = r.stringBytes();
    w.copied(1, r.bytes, at, length);
  } else if (tag === VALUE.number) numberValue(w, r.f64());
  else if (tag === VALUE.true || tag === VALUE.false) boolValue(w, tag === VALUE.true);
  else if (tag === VALUE.array) {
    const array = w.open(5);
    for (let n = r.u32(); n > 0; n--) {
      const at = w.open(1);
      recordedValue(w, r);
      w.close(at);
    }
    w.close(array);
  }
}

function boolValue(w: Writer, value: boolean): void {
  w.tag(2, VARINT);
  w.varint(value ? 1 : 0);
}

function numberValue(w: Writer, value: number): void {
  if (Number.isInteger(value) && value >= -MAX_INT64 && value < MAX_INT64) {
    w.tag(3, VARINT);
    if (value >= 0) w.varint(value);
    else {
      // Two's complement over 64 bits: ten bytes.
      let rest = BigInt.asUintN(64, BigInt(value));
      w.reserve(10);
      while (rest > 0x7fn) {
        w.buf[w.pos++] = Number(rest & 0x7fn) | 0x80;
        rest >>= 7n;
      }
      w.buf[w.pos++] = Number(rest);
    }
  } else {
    w.tag(4, I64);
    w.reserve(8);
    w.buf.writeDoubleLE(value, w.pos);
    w.pos += 8;
  }
}

function keyValue(w: Writer, field: number, key: string, value: unknown): void {
  const at = w.open(field);
  w.raw(keyBytes(key));
  const inner = w.open(2);
  anyValue(w, value);
  w.close(inner);
  w.close(at);
}

/** A KeyValue's key field, encoded once per key. */
const keys = new Map<string, Uint8Array>();
function keyBytes(key: string): Uint8Array {
  let bytes = keys.get(key);
  if (bytes === undefined) {
    const w = new Writer();
    w.string(1, key);
    bytes = Uint8Array.from(w.bytes());
    if (keys.size < 10_000) keys.set(key, bytes);
  }
  return bytes;
}

/** keyBytes() by the records' key codes. */
const codedKeys: Uint8Array[] = [];

/** A KeyValue as the records hold it: a key code or a key, then a value. */
function recordedKeyValue(w: Writer, field: number, r: SpanReader): void {
  const at = w.open(field);
  const code = r.u8();
  if (code === KEY_INLINE) {
    const key = r.stringBytes();
    w.copied(1, r.bytes, key.at, key.length);
  } else w.raw((codedKeys[code] ??= keyBytes(keyName(code))));
  const inner = w.open(2);
  recordedValue(w, r);
  w.close(inner);
  w.close(at);
}

/** A shape's name, kind and constant attributes as span fields, encoded once per shape. */
const shapeFields = new WeakMap<SpanShape, { name: Uint8Array; attributes: Uint8Array }>();
function fieldsOf(shape: SpanShape): { name: Uint8Array; attributes: Uint8Array } {
  let fields = shapeFields.get(shape);
  if (fields === undefined) {
    const name = new Writer();
    name.string(5, shape.name);
    name.tag(6, VARINT);
    name.varint(shape.kind + 1);
    const attributes = new Writer();
    for (const key in shape.attributes) keyValue(attributes, 9, key, shape.attributes[key]);
    fields = { name: Uint8Array.from(name.bytes()), attributes: Uint8Array.from(attributes.bytes()) };
    shapeFields.set(shape, fields);
  }
  return fields;
}

/** The encoded resource and scope, written once per worker: every request repeats them. */
export interface OtlpEnvelope {
  resource: Record<string, unknown>;
  scope: { name: string; version: string };
}

/**
 * Encodes batches of span records as one ExportTraceServiceRequest under `envelope`. A shape's
 * name is written from the shape; its constant attributes come first, as the worker's reader
 * puts them. The bytes returned stay valid until the second call after this one.
 */
export function encodeTraceRequest(batches: readonly Uint8Array[], shapes: ReadonlyMap<number, SpanShape>, envelope: OtlpEnvelope): Uint8Array {
  // The request is sent from the scratch buffer itself: a new buffer per request cost more in
  // page faults than the encoding. The worker sends one request at a time and encodes the next
  // only once the last is answered or given up; two buffers in turn leave the last one untouched
  // even so.
  const w = scratch[next]!;
  next = 1 - next;
  w.pos = 0;
  const resourceSpans = w.open(1, 4);
  const resource = w.open(1);
  for (const key in envelope.resource) keyValue(w, 1, key, envelope.resource[key]);
  w.close(resource);
  const scopeSpans = w.open(2, 4);
  const scope = w.open(1);
  w.string(1, envelope.scope.name);
  w.string(2, envelope.scope.version);
  w.close(scope);
  for (const batch of batches) encodeSpans(w, batch, shapes);
  w.close(scopeSpans, 4);
  w.close(resourceSpans, 4);
  return w.bytes();
}

const scratch = [new Writer(1024 * 1024), new Writer(1024 * 1024)];
let next = 0;

function encodeSpans(w: Writer, batch: Uint8Array, shapes: ReadonlyMap<number, SpanShape>): void {
  const r = new SpanReader(batch);
  const bytes = r.bytes;
  while (!r.done) {
    const head = r.u32();
    // The records put the name first and the status message before the attributes; the span
    // wants them in field order, so where they are is kept until then.
    let shape: SpanShape | undefined;
    let name = { at: 0, length: 0 };
    let kind = 0;
    if (head === INLINE) {
      name = r.stringBytes();
      kind = r.u8();
    } else shape = shapeOf(head, shapes);
    const span = w.open(2, 2);
    w.copied(1, bytes, r.skip(16), 16);
    w.copied(2, bytes, r.skip(8), 8);
    const parentAt = r.skip(8);
    const hasParent = !r.zeros(parentAt, 8);
    const bits = r.u32();
    const startMs = r.f64();
    const endMs = r.f64();
    if (bits & BITS.state) {
      const state = r.stringBytes();
      w.copied(3, bytes, state.at, state.length);
    }
    if (hasParent) w.copied(4, bytes, parentAt, 8);
    const fields = shape && fieldsOf(shape);
    if (fields) w.raw(fields.name);
    else {
      w.copied(5, bytes, name.at, name.length);
      // The API's SpanKind starts at INTERNAL = 0; OTLP's at UNSPECIFIED = 0.
      w.tag(6, VARINT);
      w.varint(kind + 1);
    }
    w.time(7, startMs);
    w.time(8, endMs);
    const message = bits & BITS.message ? r.stringBytes() : undefined;
    if (fields) w.raw(fields.attributes);
    for (let n = r.u16(); n > 0; n--) recordedKeyValue(w, 9, r);
    if (bits & BITS.links) {
      for (let links = r.u16(); links > 0; links--) {
        const link = w.open(13);
        w.copied(1, bytes, r.skip(16), 16);
        w.copied(2, bytes, r.skip(8), 8);
        for (let n = r.u16(); n > 0; n--) recordedKeyValue(w, 4, r);
        w.fixed32(6, 1 | HAS_IS_REMOTE | IS_REMOTE);
        w.close(link);
      }
    }
    const status = w.open(15);
    if (message) w.copied(2, bytes, message.at, message.length);
    w.tag(3, VARINT);
    w.varint(bits >>> STATUS_SHIFT);
    w.close(status);
    w.fixed32(16, (bits & 0xff) | HAS_IS_REMOTE | (hasParent && bits & BITS.remoteParent ? IS_REMOTE : 0));
    w.close(span, 2);
  }
}
