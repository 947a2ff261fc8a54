import { close, mkdtempSync, openSync, read, rmdirSync, unlinkSync, writev } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { MessageProperties } from 'amqplib';

const writevAt = promisify(writev);
const readAt = promisify(read);
const closeFd = promisify(close);

/** What a resend needs of a failure entry: its body and properties, as the stream delivered them. */
export interface SpooledEntry {
  content: Buffer;
  properties: MessageProperties;
}

export interface EntrySpoolOptions {
  /** Disk the spool may take, both files together; the older half is dropped when full. */
  maxBytes: number;
  /** Where the files are made (and at once unlinked); the OS temp dir by default. */
  dir?: string;
  /** Records queued for the disk beyond which new ones are not spooled (a slow disk never holds the tail up). */
  maxPendingBytes?: number;
  /** A new file could not be made: the spool turns itself off, and every resend reads the stream. */
  onError?: (err: Error) => void;
}

/** One record in SAMPLE is located by its offset; the others by reading forward from it. */
const SAMPLE = 16;
const HEADER = 16; // u32 record length, f64 offset, u32 content length; then content, then properties as JSON
/** Records are written into slabs of this size, so that spooling an entry allocates nothing. */
const SLAB = 1024 * 1024;

/**
 * A local copy of the failure entries the index has read, so that a resend reads its entry from
 * disk (tens of microseconds) and not with a stream consumer opened at its offset (6 ms or more
 * on RabbitMQ 3.10: the consume-ok alone). A cache, never the truth: whatever it does not hold, or
 * cannot read, the caller reads from the stream.
 *
 * Memory per entry is a fraction of a byte (one sampled offset and position per 16 records), so
 * the index's bound holds; spooling costs the replay a few microseconds per entry (JSON of the
 * properties, copies into a slab; Buffers in headers come back through Buffer's toJSON). Each
 * file (0600) is unlinked as soon as it is opened: it has no name, so it is reachable only through
 * this process (and /proc, like its memory), and the OS frees it when the process ends, however it ends.
 */
export class EntrySpool {
  private current: Segment;
  private older?: Segment;
  private floor = -1;
  private closed = false;

  /** Throws when the first file cannot be made, so that a bad directory stops start-up. */
  constructor(private readonly options: EntrySpoolOptions) {
    this.current = this.openSegment(-1);
  }

  /** Spools an entry the index read; entries at or before the last spooled offset are already here. */
  put(offset: number, entry: SpooledEntry): void {
    if (this.closed || offset <= this.current.lastOffset) return;
    // A disk behind: checked before the JSON, so entries not kept cost nothing.
    if (this.current.pending > (this.options.maxPendingBytes ?? 64 * 1024 * 1024)) return;
    let props: string;
    try {
      props = JSON.stringify(entry.properties);
    } catch {
      return; // a value JSON cannot hold (a BigInt): the stream has the entry
    }
    const most = HEADER + entry.content.length + props.length * 3;
    if (most > this.segmentBytes) return;
    // A segment whose write failed answers nothing more: start a new file (the disk may have room again).
    if (this.current.broken || this.current.end + most > this.segmentBytes) {
      if (!this.rotate()) return;
    }
    this.current.append(offset, entry.content, props, most);
  }

  /** The spooled entry at this offset; undefined when it is not here (the caller reads the stream). */
  async get(offset: number): Promise<SpooledEntry | undefined> {
    if (this.closed || offset < this.floor) return undefined;
    for (const segment of [this.current, this.older]) {
      if (!segment?.holds(offset)) continue;
      try {
        const record = await segment.read(offset);
        return record && decode(record);
      } catch {
        return undefined; // dropped by a rotation while read, or a disk error: the stream has it
      }
    }
    return undefined;
  }

  /** Retention removed the stream's entries before `first`: the spool stops answering for them. */
  forgetBefore(first: number): void {
    this.floor = Math.max(this.floor, first);
  }

  /** The stream was deleted and made again: its offsets start over. */
  clear(): void {
    if (this.closed) return;
    void this.older?.close();
    this.older = undefined;
    void this.current.close();
    this.floor = -1;
    const fresh = this.newSegment();
    if (fresh) this.current = fresh;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([this.current.close(), this.older?.close()]);
  }

  private get segmentBytes(): number {
    return Math.floor(this.options.maxBytes / 2);
  }

  private rotate(): boolean {
    const fresh = this.newSegment(this.current.lastOffset);
    if (!fresh) return false;
    void this.older?.close();
    this.older = this.current;
    this.current = fresh;
    return true;
  }

  private openSegment(lastOffset: number): Segment {
    return new Segment(openUnlinked(this.options.dir ?? tmpdir()), lastOffset);
  }

  /** Undefined (and the spool off) when the file cannot be made: the index it serves must go on reading. */
  private newSegment(lastOffset = -1): Segment | undefined {
    try {
      return this.openSegment(lastOffset);
    } catch (err) {
      void this.close();
      this.options.onError?.(err as Error);
      return undefined;
    }
  }
}

/** One append-only file and the sampled offsets that locate its records. */
class Segment {
  /** Bytes appended, those not yet written included: where the next record goes. */
  end = 0;
  private written = 0;
  firstOffset = -1;
  /** A write failed: what follows it cannot be located, so the segment stops answering. */
  broken = false;
  private sampleOffsets = new Float64Array(256);
  private samplePositions = new Float64Array(256);
  private samples = 0;
  private records = 0;
  private slab?: Buffer;
  private slabUsed = 0;
  private queue: Buffer[] = [];
  private scheduled = false;
  private writing?: Promise<void>;
  private closing?: Promise<void>;

  constructor(
    private readonly fd: number,
    public lastOffset: number,
  ) {}

  /** Bytes appended and not yet written. */
  get pending(): number {
    return this.end - this.written;
  }

  holds(offset: number): boolean {
    return !this.broken && this.firstOffset >= 0 && offset >= this.firstOffset && offset <= this.lastOffset && !this.closing;
  }

  /** Appends a record of at most `most` bytes; written to the file once this turn of the event loop ends. */
  append(offset: number, content: Buffer, props: string, most: number): void {
    if (most > SLAB) {
      this.seal();
      const own = Buffer.allocUnsafe(most);
      this.queue.push(own.subarray(0, this.encode(own, 0, offset, content, props)));
    } else {
      if (!this.slab || this.slabUsed + most > SLAB) {
        this.seal();
        this.slab = Buffer.allocUnsafe(SLAB);
      }
      this.slabUsed += this.encode(this.slab, this.slabUsed, offset, content, props);
    }
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  async read(offset: number): Promise<Buffer | undefined> {
    let lo = 0;
    let hi = this.samples - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.sampleOffsets[mid]! <= offset) lo = mid;
      else hi = mid - 1;
    }
    const start = this.samplePositions[lo]!;
    const stop = lo + 1 < this.samples ? this.samplePositions[lo + 1]! : this.end;
    if (this.written < stop) this.flush();
    while (this.written < stop && this.writing) await this.writing;
    if (this.written < stop || this.closing || this.broken) return undefined;
    const window = Buffer.allocUnsafe(stop - start);
    const { bytesRead } = await readAt(this.fd, window, 0, window.length, start);
    for (let at = 0; at + HEADER <= bytesRead; ) {
      const length = window.readUInt32LE(at);
      if (length < HEADER || at + length > bytesRead) return undefined;
      if (window.readDoubleLE(at + 4) === offset) return window.subarray(at, at + length);
      at += length;
    }
    return undefined;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.flush();
      await this.writing;
      await closeFd(this.fd);
    })().catch(() => undefined);
    return this.closing;
  }

  private encode(into: Buffer, at: number, offset: number, content: Buffer, props: string): number {
    if (this.records % SAMPLE === 0) this.sample(offset, this.end);
    if (this.firstOffset < 0) this.firstOffset = offset;
    this.records++;
    this.lastOffset = offset;
    content.copy(into, at + HEADER);
    const length = HEADER + content.length + into.write(props, at + HEADER + content.length);
    into.writeUInt32LE(length, at);
    into.writeDoubleLE(offset, at + 4);
    into.writeUInt32LE(content.length, at + 12);
    this.end += length;
    return length;
  }

  private seal(): void {
    if (this.slab && this.slabUsed > 0) this.queue.push(this.slab.subarray(0, this.slabUsed));
    this.slab = undefined;
    this.slabUsed = 0;
  }

  private flush(): void {
    this.seal();
    if (this.queue.length > 0) this.writing ??= this.drain();
  }

  private sample(offset: number, position: number): void {
    if (this.samples === this.sampleOffsets.length) {
      this.sampleOffsets = grow(this.sampleOffsets);
      this.samplePositions = grow(this.samplePositions);
    }
    this.sampleOffsets[this.samples] = offset;
    this.samplePositions[this.samples] = position;
    this.samples++;
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const parts = this.queue;
        this.queue = [];
        const bytes = parts.reduce((sum, part) => sum + part.length, 0);
        await writevAt(this.fd, parts, this.written);
        this.written += bytes;
      }
    } catch {
      this.broken = true;
      this.queue = [];
    } finally {
      this.writing = undefined;
    }
  }
}

function decode(record: Buffer): SpooledEntry {
  const contentLength = record.readUInt32LE(12);
  const content = Buffer.from(record.subarray(HEADER, HEADER + contentLength));
  const properties = JSON.parse(record.toString('utf8', HEADER + contentLength), revive) as MessageProperties;
  return { content, properties };
}

/** Buffer's toJSON wrote a header's bytes as `{ type: 'Buffer', data }`; amqplib sends bytes only for a Buffer. */
function revive(_key: string, value: unknown): unknown {
  const tagged = value as { type?: unknown; data?: unknown } | null;
  if (tagged && typeof tagged === 'object' && tagged.type === 'Buffer' && Array.isArray(tagged.data)) return Buffer.from(tagged.data as number[]);
  return value;
}

function grow(array: Float64Array<ArrayBuffer>): Float64Array<ArrayBuffer> {
  const bigger = new Float64Array(array.length * 2);
  bigger.set(array);
  return bigger;
}

/** A file nobody else can open: made in a private directory, then unlinked with the directory. */
function openUnlinked(dir: string): number {
  const private_ = mkdtempSync(join(dir, 'webhooks-spool-'));
  const path = join(private_, 'entries');
  const fd = openSync(path, 'wx+', 0o600);
  unlinkSync(path);
  rmdirSync(private_);
  return fd;
}
