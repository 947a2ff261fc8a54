import { encodeShape, type RecordedSpan, readSpanRecords, type SpanAttributes, type SpanShape, SpanWriter } from '../../libs/tracing/span-records.js';

/**
 * The program's side of the export worker without the worker: spans write into `writer`, and
 * bytes() hands back every span written so far as the worker would get them. The buffer starts
 * small, so that spans grow it mid-span.
 */
export class FakeSpanChannel {
  readonly writer = new SpanWriter(64);
  /** Shapes by kind and name, each encoded once. */
  readonly shapes = new Map<string, SpanShape>();
  private written = new Uint8Array(0);

  ended(): void {}

  shape(name: string, kind: number, attributes?: () => SpanAttributes): SpanShape {
    const key = `${kind} ${name}`;
    let shape = this.shapes.get(key);
    if (!shape) {
      shape = encodeShape(name, kind, attributes?.());
      this.shapes.set(key, shape);
    }
    return shape;
  }

  bytes(): Uint8Array {
    const batch = this.writer.take();
    const all = new Uint8Array(this.written.length + batch.length);
    all.set(this.written);
    all.set(new Uint8Array(batch.buffer, 0, batch.length), this.written.length);
    this.written = all;
    return all;
  }

  /** Every span written so far, read back as the worker reads them. */
  read(): RecordedSpan[] {
    const spans: RecordedSpan[] = [];
    readSpanRecords(this.bytes(), (span) => spans.push(span));
    return spans;
  }
}
