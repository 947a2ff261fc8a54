import { BITS, keyName, readSpanHead, type SpanRecords, type SpanShape, STATUS_SHIFT } from './span-records.js';

/**
 * An OTLP/protobuf ExportTraceServiceRequest written straight from span records
 * (span-records.ts), without a span object per span: the export worker's encoder. The SDK's
 * serializer needs the SDK's spans, and rebuilding them cost the worker about 25 µs of CPU and
 * most of the process's garbage per span; this writes a span in about one. The SDK's exporter
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

  /** Opens a length-delimited field; its length byte is written by close(). */
  open(field: number): number {
    this.tag(field, LEN);
    this.reserve(1);
    return this.pos++;
  }

  /** Writes the length of what follows `at`, moving it up when the length takes more than a byte. */
  close(at: number): void {
    const length = this.pos - at - 1;
    if (length < 0x80) {
      this.buf[at] = length;
      return;
    }
    const extra = varintSize(length) - 1;
    this.reserve(extra);
    this.buf.copyWithin(at + 1 + extra, at + 1, this.pos);
    this.pos += extra;
    const end = this.pos;
    this.pos = at;
    this.varint(length);
    this.pos = end;
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

  /** Bytes encoded once (a shape's name and constant attributes, a key). */
  raw(bytes: Uint8Array): void {
    const n = bytes.length;
    this.reserve(n);
    const buf = this.buf;
    for (let i = 0; i < n; i++) buf[this.pos + i] = bytes[i]!;
    this.pos += n;
  }

  /** A hex id (trace or span id) as its bytes. */
  id(field: number, hex: string): void {
    this.tag(field, LEN);
    const bytes = hex.length >>> 1;
    this.varint(bytes);
    this.reserve(bytes);
    const buf = this.buf;
    for (let i = 0; i < bytes; i++) buf[this.pos++] = (HEX[hex.charCodeAt(2 * i)]! << 4) | HEX[hex.charCodeAt(2 * i + 1)]!;
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

/** Hex digit values by character code. */
const HEX = new Uint8Array(128);
for (let i = 0; i < 16; i++) {
  HEX['0123456789abcdef'.charCodeAt(i)] = i;
  HEX['0123456789ABCDEF'.charCodeAt(i)] = i;
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
  else if (typeof value === 'boolean') {
    w.tag(2, VARINT);
    w.varint(value ? 1 : 0);
  } else if (typeof value === 'number') {
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
  } else if (Array.isArray(value)) {
    const array = w.open(5);
    for (const item of value) {
      const at = w.open(1);
      if (item !== null && item !== undefined) anyValue(w, item);
      w.close(at);
    }
    w.close(array);
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
 * puts them.
 */
export function encodeTraceRequest(batches: readonly SpanRecords[], shapes: ReadonlyMap<number, SpanShape>, envelope: OtlpEnvelope): Uint8Array {
  // One scratch buffer, grown as needed and kept: the request is copied out of it at the end.
  const w = scratch;
  w.pos = 0;
  const resourceSpans = w.open(1);
  const resource = w.open(1);
  for (const key in envelope.resource) keyValue(w, 1, key, envelope.resource[key]);
  w.close(resource);
  const scopeSpans = w.open(2);
  const scope = w.open(1);
  w.string(1, envelope.scope.name);
  w.string(2, envelope.scope.version);
  w.close(scope);
  for (const records of batches) encodeSpans(w, records, shapes);
  w.close(scopeSpans);
  w.close(resourceSpans);
  return Buffer.from(w.bytes());
}

const scratch = new Writer(1024 * 1024);

function encodeSpans(w: Writer, records: SpanRecords, shapes: ReadonlyMap<number, SpanShape>): void {
  let i = 0;
  const attributes = (field: number): void => {
    const count = records[i++] as number;
    for (let n = 0; n < count; n++, i += 2) {
      const key = records[i] as string | number;
      keyValue(w, field, typeof key === 'number' ? keyName(key) : key, records[i + 1]);
    }
  };
  while (i < records.length) {
    const { shape, name, kind, traceId, spanId, parentSpanId, bits, startMs, endMs, traceState, statusMessage, next } = readSpanHead(records, i, shapes);
    i = next;

    const span = w.open(2);
    w.id(1, traceId);
    w.id(2, spanId);
    if (traceState !== '') w.string(3, traceState);
    if (parentSpanId !== '') w.id(4, parentSpanId);
    const fields = shape && fieldsOf(shape);
    if (fields) w.raw(fields.name);
    else {
      w.string(5, name);
      // The API's SpanKind starts at INTERNAL = 0; OTLP's at UNSPECIFIED = 0.
      w.tag(6, VARINT);
      w.varint(kind + 1);
    }
    w.time(7, startMs);
    w.time(8, endMs);
    if (fields) w.raw(fields.attributes);
    attributes(9);
    if (bits & BITS.links) {
      const links = records[i++] as number;
      for (let n = 0; n < links; n++) {
        const link = w.open(13);
        w.id(1, records[i] as string);
        w.id(2, records[i + 1] as string);
        i += 2;
        attributes(4);
        w.fixed32(6, 1 | HAS_IS_REMOTE | IS_REMOTE);
        w.close(link);
      }
    }
    const status = w.open(15);
    if (statusMessage !== '') w.string(2, statusMessage);
    w.tag(3, VARINT);
    w.varint(bits >>> STATUS_SHIFT);
    w.close(status);
    w.fixed32(16, (bits & 0xff) | HAS_IS_REMOTE | (parentSpanId !== '' && bits & BITS.remoteParent ? IS_REMOTE : 0));
    w.close(span);
  }
}
