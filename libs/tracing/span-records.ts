import { ATTR } from './attributes.js';

/**
 * Ended spans as they cross from a program's thread to its export worker: bytes in an
 * ArrayBuffer that postMessage transfers, not copies. A structured clone of the same fields as
 * JavaScript values cost the dispatcher's thread about 9 µs per delivery and kept every string
 * alive until the batch went; these bytes are written in well under a microsecond a span, and the
 * worker copies ids and strings into the OTLP request as they are (otlp-protobuf.ts). A span's
 * name, kind and constant attributes are a shape sent once (SpanShape), attribute keys of ours
 * are one byte (KEYS), and what is usually empty is left out. Little-endian, per span:
 *
 *   u32 shape id, or INLINE followed by the name (a string) and the kind (u8);
 *   trace id (16 bytes), span id (8), parent span id (8, zeros for a root);
 *   u32 bits (BITS), f64 start and end (epoch ms);
 *   the trace state if BITS.state, the status message if BITS.message (strings);
 *   u16 attribute count, then per attribute its key (a KEYS index as u8, or KEY_INLINE and the
 *   key as a string) and its value (VALUE tag, then the string, f64 or items);
 *   if BITS.links: u16 link count, then per link its trace id, span id and attributes as above.
 *
 * A string is its UTF-8 length (u32) and bytes.
 */
export const INLINE = 0xffffffff;
export const KEY_INLINE = 0xff;

/** `bits`: the W3C trace flags in the low byte, then these; the status code from STATUS_SHIFT. */
export const BITS = { remoteParent: 0x100, state: 0x200, message: 0x400, links: 0x800 } as const;
export const STATUS_SHIFT = 12;

/** What follows an attribute's key. */
export const VALUE = { string: 0, false: 1, true: 2, number: 3, array: 4, null: 5 } as const;

/** A span's name, kind and the attributes every span of that shape has, sent to the worker once. */
export interface SpanShape {
  id: number;
  name: string;
  kind: number;
  attributes: Record<string, string | number | boolean>;
}

/** Attribute keys sent as their index here. */
const KEYS: readonly string[] = [...new Set([...Object.values(ATTR), 'db.system.name', 'db.operation.name', 'db.operation.batch.size'])];
const KEY_CODES = new Map(KEYS.map((key, code) => [key, code]));

/** The key a KEYS index stands for. */
export function keyName(code: number): string {
  return KEYS[code]!;
}

/** A key as the records carry it: its KEYS index, or the key itself. */
export function keyCode(key: string): string | number {
  return KEY_CODES.get(key) ?? key;
}

/** Hex digit values by character code. */
const HEX = new Uint8Array(128);
for (let i = 0; i < 16; i++) {
  HEX['0123456789abcdef'.charCodeAt(i)] = i;
  HEX['0123456789ABCDEF'.charCodeAt(i)] = i;
}

const utf8 = new TextEncoder();

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

  private room(bytes: number): void {
    if (this.pos + bytes <= this.bytes.length) return;
    const bigger = new ArrayBuffer(Math.max(2 * this.bytes.length, this.pos + bytes));
    const copy = new Uint8Array(bigger);
    copy.set(this.bytes.subarray(0, this.pos));
    this.buffer = bigger;
    this.bytes = copy;
    this.view = new DataView(bigger);
  }

  u8(value: number): void {
    this.room(1);
    this.bytes[this.pos++] = value;
  }

  u16(value: number): void {
    this.room(2);
    this.view.setUint16(this.pos, value, true);
    this.pos += 2;
  }

  u32(value: number): void {
    this.room(4);
    this.view.setUint32(this.pos, value, true);
    this.pos += 4;
  }

  f64(value: number): void {
    this.room(8);
    this.view.setFloat64(this.pos, value, true);
    this.pos += 8;
  }

  /** Big-endian, as an id's bytes are written from its hex. */
  u32be(value: number): void {
    this.room(4);
    this.view.setUint32(this.pos, value, false);
    this.pos += 4;
  }

  /** A hex id as its `size` bytes; an empty one (no parent) as zeros. */
  id(hex: string, size: number): void {
    this.room(size);
    const bytes = this.bytes;
    let pos = this.pos;
    if (hex.length !== 2 * size) bytes.fill(0, pos, pos + size);
    else for (let i = 0; i < 2 * size; i += 2) bytes[pos++] = (HEX[hex.charCodeAt(i)]! << 4) | HEX[hex.charCodeAt(i + 1)]!;
    this.pos += size;
  }

  string(value: string): void {
    const n = value.length;
    this.room(4 + 3 * n);
    const bytes = this.bytes;
    const start = this.pos + 4;
    let pos = start;
    // Most of what spans say is ASCII, copied by hand: faster than encodeInto for short strings.
    let i = 0;
    for (; i < n; i++) {
      const code = value.charCodeAt(i);
      if (code > 0x7f) break;
      bytes[pos++] = code;
    }
    if (i < n) pos += utf8.encodeInto(i === 0 ? value : value.slice(i), bytes.subarray(pos)).written;
    this.view.setUint32(this.pos, pos - start, true);
    this.pos = pos;
  }

  /** An attribute's key: a KEYS index from keyCode(), or a key of someone else's. */
  key(key: string | number): void {
    if (typeof key === 'number') this.u8(key);
    else {
      this.u8(KEY_INLINE);
      this.string(key);
    }
  }

  value(value: unknown): void {
    if (typeof value === 'string') {
      this.u8(VALUE.string);
      this.string(value);
    } else if (typeof value === 'number') {
      this.u8(VALUE.number);
      this.f64(value);
    } else if (typeof value === 'boolean') this.u8(value ? VALUE.true : VALUE.false);
    else if (Array.isArray(value)) {
      this.u8(VALUE.array);
      this.u32(value.length);
      for (const item of value) this.value(item);
    } else this.u8(VALUE.null);
  }

  /** Attributes given as an object (a span of the SDK's, or a link's): the count, then each. */
  attributes(attributes: Record<string, unknown> | undefined): void {
    let count = 0;
    for (const key in attributes) if (attributes[key] !== undefined) count++;
    this.u16(count);
    for (const key in attributes) {
      const value = attributes[key];
      if (value === undefined) continue;
      this.key(keyCode(key));
      this.value(value);
    }
  }
}

/** A batch as it crosses to the worker: `buffer` is transferred, its first `length` bytes written. */
export interface SpanBatch {
  spans: number;
  buffer: ArrayBuffer;
  length: number;
}

/** The worker's side: reads a batch in the order it was written. */
export class SpanReader {
  readonly bytes: Uint8Array;
  private readonly view: DataView;
  pos = 0;

  constructor(batch: Uint8Array) {
    this.bytes = batch;
    this.view = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  }

  get done(): boolean {
    return this.pos >= this.bytes.length;
  }

  u8(): number {
    return this.bytes[this.pos++]!;
  }

  u16(): number {
    const value = this.view.getUint16(this.pos, true);
    this.pos += 2;
    return value;
  }

  u32(): number {
    const value = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return value;
  }

  f64(): number {
    const value = this.view.getFloat64(this.pos, true);
    this.pos += 8;
    return value;
  }

  /** Where the next `size` bytes start; they are skipped. */
  skip(size: number): number {
    const at = this.pos;
    this.pos += size;
    return at;
  }

  /** A string's bytes, where they start and how many, moving past them. */
  stringBytes(): { at: number; length: number } {
    const length = this.u32();
    return { at: this.skip(length), length };
  }

  string(): string {
    const { at, length } = this.stringBytes();
    return Buffer.from(this.bytes.buffer, this.bytes.byteOffset + at, length).toString('utf8');
  }

  hex(size: number): string {
    const at = this.skip(size);
    return Buffer.from(this.bytes.buffer, this.bytes.byteOffset + at, size).toString('hex');
  }

  /** Whether the `size` bytes at `at` are all zero (an empty parent span id). */
  zeros(at: number, size: number): boolean {
    for (let i = 0; i < size; i++) if (this.bytes[at + i] !== 0) return false;
    return true;
  }

  key(): string {
    const code = this.u8();
    return code === KEY_INLINE ? this.string() : KEYS[code]!;
  }

  value(): unknown {
    const tag = this.u8();
    switch (tag) {
      case VALUE.string:
        return this.string();
      case VALUE.number:
        return this.f64();
      case VALUE.false:
        return false;
      case VALUE.true:
        return true;
      case VALUE.array: {
        const items: unknown[] = [];
        for (let n = this.u32(); n > 0; n--) items.push(this.value());
        return items;
      }
      default:
        return null;
    }
  }

  attributesInto(attributes: Record<string, unknown>): Record<string, unknown> {
    for (let n = this.u16(); n > 0; n--) {
      const key = this.key();
      attributes[key] = this.value();
    }
    return attributes;
  }
}

export interface SpanLink {
  traceId: string;
  spanId: string;
  attributes: Record<string, unknown>;
}

/** One span read back from the records, as the worker rebuilds it. */
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
  statusCode: number;
  statusMessage: string;
  attributes: Record<string, unknown>;
  links: SpanLink[];
}

/** The shape a span names, or an error for one never sent (the port keeps order, so a bug). */
export function shapeOf(id: number, shapes: ReadonlyMap<number, SpanShape>): SpanShape {
  const shape = shapes.get(id);
  if (!shape) throw new Error(`span shape ${id} was never sent`);
  return shape;
}

/** Reads every span of a batch, in order, its shape's attributes first (for http/json and tests). */
export function readSpanRecords(batch: Uint8Array, shapes: ReadonlyMap<number, SpanShape>, each: (span: RecordedSpan) => void): void {
  const r = new SpanReader(batch);
  while (!r.done) {
    const head = r.u32();
    let shape: SpanShape | undefined;
    let name: string;
    let kind: number;
    if (head === INLINE) {
      name = r.string();
      kind = r.u8();
    } else {
      shape = shapeOf(head, shapes);
      ({ name, kind } = shape);
    }
    const traceId = r.hex(16);
    const spanId = r.hex(8);
    const parentAt = r.pos;
    const parentSpanId = r.zeros(parentAt, 8) ? (r.skip(8), '') : r.hex(8);
    const bits = r.u32();
    const startMs = r.f64();
    const endMs = r.f64();
    const traceState = bits & BITS.state ? r.string() : '';
    const statusMessage = bits & BITS.message ? r.string() : '';
    const attributes = r.attributesInto(shape ? { ...shape.attributes } : {});
    const links: SpanLink[] = [];
    if (bits & BITS.links) {
      for (let n = r.u16(); n > 0; n--) {
        const traceId = r.hex(16);
        const spanId = r.hex(8);
        links.push({ traceId, spanId, attributes: r.attributesInto({}) });
      }
    }
    each({
      name,
      kind,
      traceId,
      spanId,
      parentSpanId,
      flags: bits & 0xff,
      remoteParent: (bits & BITS.remoteParent) !== 0,
      traceState,
      startMs,
      endMs,
      statusCode: bits >>> STATUS_SHIFT,
      statusMessage,
      attributes,
      links,
    });
  }
}
