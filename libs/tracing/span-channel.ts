import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Logger } from '../logger/index.js';
import type { ExportWorkerSettings } from './export-worker.js';
import { encodeShape, type SpanAttributes, type SpanShape, SpanWriter } from './span-records.js';

/**
 * Spans sent to the worker at once, and how long an ended span may wait for its batch. Each
 * batch wakes the worker thread, which on a busy host takes a core from the program's thread
 * at that moment: a thousand spans (a few hundred deliveries) a wake-up, not a quarter of that.
 */
const BATCH_SPANS = 1_024;
const BATCH_DELAY_MS = 20;
/** Batches the worker has not taken yet beyond which new spans are dropped, not queued without end. */
const MAX_OUTSTANDING = 16;
/**
 * Buffers the worker gave back, kept for the next batches: a request's worth (8 batches), given
 * back at once when it is sent, so that the next batches are written into memory already mapped.
 */
const MAX_SPARE = 12;
/**
 * A batch's buffer: a thousand of the dispatcher's spans take about 380 KiB (a delivery's three,
 * as OTLP protobuf, about 1,100 bytes). A batch that outgrows it is copied into a bigger one that
 * is not reused, so it is sized for a batch of the largest spans of ours, with room to spare.
 */
const BUFFER_BYTES = 512 * 1024;
const DROP_WARNING_EVERY_MS = 60_000;

/**
 * The program's side of the export worker (export-worker.ts): ended spans are written by
 * `writer` and their bytes handed over (transferred, not copied) in batches. A worker that falls behind (its thread starved of CPU) costs
 * spans, counted and logged, never memory without bound or time on the program's thread; a
 * collector that is down fills the worker's own bounded queue, and it drops the rest.
 */
export class SpanChannel {
  /** Where ended spans write their fields (span-records.ts layout). */
  readonly writer = new SpanWriter(BUFFER_BYTES, () => this.spare.pop());
  private readonly spare: ArrayBuffer[] = [];
  private timer: NodeJS.Timeout | undefined;
  private outstanding = 0;
  private dropped = 0;
  private lastDropWarning = 0;
  private nextFlush = 0;
  private readonly flushes = new Map<number, () => void>();
  private closed = false;
  /** Shapes by kind, then name: a shape's constant attributes follow from its name and kind. */
  private readonly shapes: Array<Map<string, SpanShape>> = [];
  private shut: (() => void) | undefined;
  private readonly worker: Worker;

  constructor(settings: ExportWorkerSettings, private readonly logger?: Logger) {
    this.worker = new Worker(workerScript(), { workerData: settings });
    // A program exits when its own work is done; the worker's exports never hold it open.
    this.worker.unref();
    this.worker.on('message', (message: { type: string; id?: number; message?: string; buffers?: ArrayBuffer[] }) => {
      if (message.type === 'took') this.outstanding--;
      else if (message.type === 'spent') this.keep(message.buffers!);
      else if (message.type === 'flushed') this.settleFlush(message.id!);
      else if (message.type === 'shut') this.shut?.();
      // The worker says what went wrong in its message (exporter error, spans dropped), at most once a minute each.
      else if (message.type === 'diag') this.logger?.warn('tracing: exporter warning', { detail: message.message });
    });
    this.worker.on('error', (err) => {
      this.logger?.warn('tracing: export worker stopped; spans are no longer exported', { error: err.message });
      this.close();
    });
    this.worker.on('exit', () => this.close());
  }

  /**
   * The shape of spans named `name` of this kind, its fields encoded the first time it is asked
   * for. `attributes` are the constant ones, the same for every span of that name and kind.
   */
  shape(name: string, kind: number, attributes?: () => SpanAttributes): SpanShape {
    const byName = (this.shapes[kind] ??= new Map());
    let shape = byName.get(name);
    if (shape === undefined) {
      shape = encodeShape(name, kind, attributes?.());
      byName.set(name, shape);
    }
    return shape;
  }

  /** Called once a span's fields are written. */
  ended(): void {
    if (++this.writer.spans >= BATCH_SPANS) this.send();
    else if (this.timer === undefined) {
      this.timer = setTimeout(() => this.send(), BATCH_DELAY_MS);
      this.timer.unref();
    }
  }

  /** Every span ended so far, exported (bounded by the exporter's own timeout). */
  flush(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.send();
    const id = this.nextFlush++;
    return new Promise<void>((resolve) => {
      this.flushes.set(id, resolve);
      this.worker.postMessage({ type: 'flush', id });
    });
  }

  /** Exports what is left, then ends the worker; bounded by `timeoutMs`, safe twice. */
  async shutdown(timeoutMs: number): Promise<void> {
    if (this.closed) return;
    this.send();
    const done = new Promise<void>((resolve) => {
      this.shut = resolve;
    });
    this.worker.postMessage({ type: 'shutdown' });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
      timer.unref();
    });
    // The worker ends by itself once it has exported and closed its port; terminate() only one that did not.
    const exited = new Promise<void>((resolve) => this.worker.once('exit', () => resolve()));
    await Promise.race([done.then(() => exited), late]);
    clearTimeout(timer);
    this.close();
    await this.worker.terminate();
  }

  private send(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.writer.spans === 0) return;
    const batch = this.writer.take();
    if (this.closed) return;
    if (this.outstanding >= MAX_OUTSTANDING) {
      this.keep([batch.buffer]);
      return this.drop(batch.spans);
    }
    this.outstanding++;
    this.worker.postMessage(batch, [batch.buffer]);
  }

  /** Buffers whose spans were sent or dropped, written again (a grown one is left to the collector). */
  private keep(buffers: ArrayBuffer[]): void {
    for (const buffer of buffers) if (this.spare.length < MAX_SPARE && buffer.byteLength === BUFFER_BYTES) this.spare.push(buffer);
  }

  private drop(count: number): void {
    this.dropped += count;
    const now = Date.now();
    if (now - this.lastDropWarning < DROP_WARNING_EVERY_MS) return;
    this.lastDropWarning = now;
    this.logger?.warn('tracing: spans dropped, the export worker is behind', { dropped: this.dropped });
    this.dropped = 0;
  }

  private settleFlush(id: number): void {
    this.flushes.get(id)?.();
    this.flushes.delete(id);
  }

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    for (const resolve of this.flushes.values()) resolve();
    this.flushes.clear();
    this.shut?.();
  }
}

/** The compiled worker beside this file, or, when this file runs from source (jest), the build's. */
function workerScript(): URL {
  const candidates = [new URL('./export-worker.js', import.meta.url), new URL('../../dist/libs/tracing/export-worker.js', import.meta.url)];
  const found = candidates.find((url) => existsSync(fileURLToPath(url)));
  if (!found) throw new Error('tracing: the export worker is not built (npm run build)');
  return found;
}
