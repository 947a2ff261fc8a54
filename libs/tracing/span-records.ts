import { ATTR } from './attributes.js';

/**
 * Ended spans as they cross from a program's thread to its export worker: one flat array of
 * primitives per batch. postMessage's structured clone copies it on the program's thread, at
 * about 40 ns a string and a few for a number, so the layout carries as few strings as it can:
 * a span's name, kind and constant attributes are a shape sent once (SpanShape), attribute keys
 * of ours are numbers (KEYS), and what is usually empty is left out. Per span, in order:
 *
 *   shape id, or INLINE followed by name and kind;
 *   traceId, spanId, parentSpanId ('' for a root), bits (BITS), start and end (epoch ms);
 *   traceState if BITS.state, status message if BITS.message;
 *   attribute count, then per attribute its key (a KEYS index, or the key) and value;
 *   if BITS.links: link count, then per link traceId, spanId and its attributes as above.
 */
export type SpanRecords = unknown[];

export const INLINE = -1;

/** `bits`: the W3C trace flags in the low byte, then these; the status code from STATUS_SHIFT. */
export const BITS = { remoteParent: 0x100, state: 0x200, message: 0x400, links: 0x800 } as const;
export const STATUS_SHIFT = 12;

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

/** A key as the records carry it. */
export function keyCode(key: string): string | number {
  return KEY_CODES.get(key) ?? key;
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

/** Reads every span of a batch, in order, its shape's attributes first. */
export function readSpanRecords(records: SpanRecords, shapes: ReadonlyMap<number, SpanShape>, each: (span: RecordedSpan) => void): void {
  let i = 0;
  const attributesInto = (attributes: Record<string, unknown>): Record<string, unknown> => {
    const count = records[i++] as number;
    for (let n = 0; n < count; n++, i += 2) {
      const key = records[i] as string | number;
      attributes[typeof key === 'number' ? KEYS[key]! : key] = records[i + 1];
    }
    return attributes;
  };
  while (i < records.length) {
    const { shape, name, kind, traceId, spanId, parentSpanId, bits, startMs, endMs, traceState, statusMessage, next } = readSpanHead(records, i, shapes);
    i = next;
    const attributes: Record<string, unknown> = shape ? { ...shape.attributes } : {};
    attributesInto(attributes);
    const links: SpanLink[] = [];
    if (bits & BITS.links) {
      const count = records[i++] as number;
      for (let n = 0; n < count; n++) {
        const link = { traceId: records[i] as string, spanId: records[i + 1] as string, attributes: {} };
        i += 2;
        attributesInto(link.attributes);
        links.push(link);
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

/** A span's fields before its attributes; `next` is where its attribute count is. */
export interface SpanHead {
  /** Undefined for an INLINE span. */
  shape: SpanShape | undefined;
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  bits: number;
  startMs: number;
  endMs: number;
  traceState: string;
  statusMessage: string;
  next: number;
}

export function readSpanHead(records: SpanRecords, at: number, shapes: ReadonlyMap<number, SpanShape>): SpanHead {
  let i = at;
  const head = records[i++] as number;
  let shape: SpanShape | undefined;
  let name: string;
  let kind: number;
  if (head === INLINE) {
    name = records[i++] as string;
    kind = records[i++] as number;
  } else {
    shape = shapes.get(head);
    if (!shape) throw new Error(`span shape ${head} was never sent`);
    ({ name, kind } = shape);
  }
  const bits = records[i + 3] as number;
  const span = {
    shape,
    name,
    kind,
    traceId: records[i] as string,
    spanId: records[i + 1] as string,
    parentSpanId: records[i + 2] as string,
    bits,
    startMs: records[i + 4] as number,
    endMs: records[i + 5] as number,
    traceState: '',
    statusMessage: '',
    next: 0,
  };
  i += 6;
  if (bits & BITS.state) span.traceState = records[i++] as string;
  if (bits & BITS.message) span.statusMessage = records[i++] as string;
  span.next = i;
  return span;
}

/** Appends attributes given as an object (a span of the SDK's, or a link's). */
export function pushAttributes(records: SpanRecords, attributes: Record<string, unknown> | undefined): void {
  if (!attributes) return void records.push(0);
  const at = records.length;
  records.push(0);
  let count = 0;
  for (const key in attributes) {
    const value = attributes[key];
    if (value === undefined) continue;
    records.push(keyCode(key), value);
    count++;
  }
  records[at] = count;
}
