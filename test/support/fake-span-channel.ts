import { type RecordedSpan, readSpanRecords, type SpanShape, SpanWriter } from '../../libs/tracing/span-records.js';

/**
 * The program's side of the export worker without the worker: spans write into `writer`, and
 * bytes() hands back every span written so far as the worker would get them. The buffer starts
 * small, so that spans grow it mid-span.
 */
export class FakeSpanChannel {
  readonly writer = new SpanWriter(64);
  readonly shapes = new Map<number, SpanShape>();
  private readonly byName = new Map<string, SpanShape>();
  private written = new Uint8Array(0);

  ended(): void {}

  shape(name: string, kind: number, attributes?: () => SpanShape['attributes']): SpanShape {
    const key = `${kind} ${name}`;
    let shape = this.byName.get(key);
    if (!shape) {
      shape = { id: this.shapes.size, name, kind, attributes: attributes?.() ?? {} };
      this.shapes.set(shape.id, shape);
      this.byName.set(key, shape);
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
    readSpanRecords(this.bytes(), this.shapes, (span) => spans.push(span));
    return spans;
  }
}
