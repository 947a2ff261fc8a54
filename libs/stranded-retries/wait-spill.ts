import { closeSync, ftruncateSync, mkdtempSync, openSync, readdirSync, readSync, renameSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { uuidToWords, wordsToUuid } from './uuid-words.js';

/**
 * The waits of a retry tier beyond what the watch keeps in memory, on local disk, in the order
 * read: a tier hands its messages back in the order they entered it, so the waits that matter
 * next (due first, possibly stranded) are the ones in memory, and the rest are read back, in
 * order, as those come back. A dead endpoint under load leaves a million waits in the long tiers;
 * on disk they cost 50 to 60 bytes each, and the process's memory stays what the window holds.
 *
 * A record is its key (a UUID as 16 bytes, any other key as UTF-8 with its length) and its
 * columns as float64. The files are this process's alone: a snapshot carries their records to
 * the next process, and they are removed on close.
 */
const UUID_KEY = 0;
const RAW_KEY = 1;
/** Appends are gathered in memory up to this and written in one call. */
const WRITE_BATCH = 64 * 1024;
/** Reads back this much at a time. */
const READ_BATCH = 256 * 1024;
/** A file read this far past its start, and mostly read, is rewritten with only what is left. */
const COMPACT_AFTER = 64 * 1024 * 1024;

const DIR_PREFIX = 'webhooks-retry-watch-';

/** A dispatcher killed without its stop() leaves its files: the next one on the host removes them. */
function removeDeadProcessesFiles(parent: string): void {
  let names: string[];
  try {
    names = readdirSync(parent);
  } catch {
    return;
  }
  for (const name of names) {
    const pid = Number(/^webhooks-retry-watch-(\d+)-/.exec(name)?.[1]);
    if (!Number.isSafeInteger(pid) || pid === process.pid || alive(pid)) continue;
    rmSync(join(parent, name), { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

class SpillFile {
  count = 0;
  readPos = 0;
  writePos = 0;
  pending: Buffer[] = [];
  pendingBytes = 0;
  /** Bytes read from the file and not consumed yet (a record cut at the end of a read). */
  carry: Buffer = Buffer.alloc(0);

  constructor(
    readonly path: string,
    public fd: number,
  ) {}
}

export class WaitSpill {
  private readonly files = new Map<string, SpillFile>();
  private dir?: string;
  private total = 0;
  /** Files rewritten with only what was left in them. */
  compactions = 0;
  /** Holds while a snapshot reads byte ranges of the files: they are neither truncated nor rewritten meanwhile. */
  private holds = 0;
  private readonly words = new Uint32Array(4);
  private readonly column = Buffer.alloc(8);

  constructor(
    private readonly columns: number,
    private readonly parentDir: string = tmpdir(),
    private readonly compactAfter = COMPACT_AFTER,
  ) {}

  /** The directory of the files, once one is written. */
  get directory(): string | undefined {
    return this.dir;
  }

  get size(): number {
    return this.total;
  }

  count(lane: string): number {
    return this.files.get(lane)?.count ?? 0;
  }

  lanes(): string[] {
    return [...this.files].filter(([, file]) => file.count > 0).map(([name]) => name);
  }

  /** Bytes on disk (written or about to be) not read back yet. */
  bytesOnDisk(): number {
    let bytes = 0;
    for (const file of this.files.values()) bytes += file.writePos + file.pendingBytes - file.readPos;
    return bytes;
  }

  append(lane: string, key: string, values: readonly number[]): void {
    const file = this.file(lane);
    const record = this.encode(key, values);
    file.pending.push(record);
    file.pendingBytes += record.length;
    file.count++;
    this.total++;
    if (file.pendingBytes >= WRITE_BATCH) this.flush(file);
  }

  /** Encoded records as `append` writes them (a snapshot's parts hold the same). */
  encode(key: string, values: readonly number[]): Buffer {
    const uuid = uuidToWords(key, this.words, 0);
    const keyBytes = uuid ? 16 : Buffer.byteLength(key);
    const record = Buffer.allocUnsafe(1 + (uuid ? 16 : 2 + keyBytes) + 8 * this.columns);
    let at = 0;
    record[at++] = uuid ? UUID_KEY : RAW_KEY;
    if (uuid) {
      for (let i = 0; i < 4; i++) at = record.writeUInt32BE(this.words[i]!, at);
    } else {
      at = record.writeUInt16BE(keyBytes, at);
      at += record.write(key, at);
    }
    for (let c = 0; c < this.columns; c++) at = record.writeDoubleLE(values[c] ?? NaN, at);
    return record;
  }

  /**
   * Decodes the records in `bytes` in order; returns how many bytes they took (a record cut at
   * the end is left for the next call).
   */
  decode(bytes: Buffer, visit: (key: string, values: number[]) => void, max = Infinity): { used: number; records: number } {
    let at = 0;
    let records = 0;
    while (records < max && at < bytes.length) {
      const kind = bytes[at]!;
      let keyEnd: number;
      let key: string;
      if (kind === UUID_KEY) {
        keyEnd = at + 17;
        if (keyEnd > bytes.length) break;
        for (let i = 0; i < 4; i++) this.words[i] = bytes.readUInt32BE(at + 1 + i * 4);
        key = wordsToUuid(this.words, 0);
      } else {
        if (at + 3 > bytes.length) break;
        keyEnd = at + 3 + bytes.readUInt16BE(at + 1);
        if (keyEnd > bytes.length) break;
        key = bytes.toString('utf8', at + 3, keyEnd);
      }
      const end = keyEnd + 8 * this.columns;
      if (end > bytes.length) break;
      const values = new Array<number>(this.columns);
      for (let c = 0; c < this.columns; c++) values[c] = bytes.readDoubleLE(keyEnd + c * 8);
      visit(key, values);
      at = end;
      records++;
    }
    return { used: at, records };
  }

  /** Reads back up to `max` of the lane's oldest records, in order, and forgets them here. */
  take(lane: string, max: number, visit: (key: string, values: number[]) => void): number {
    const file = this.files.get(lane);
    if (!file || file.count === 0) return 0;
    this.flush(file);
    let taken = 0;
    while (taken < max && file.count > 0) {
      const { used, records } = this.decode(file.carry, visit, max - taken);
      file.carry = file.carry.subarray(used);
      file.count -= records;
      this.total -= records;
      taken += records;
      if (taken >= max || file.count === 0) break;
      // The next record is not (wholly) read yet.
      const want = Math.min(READ_BATCH, file.writePos - file.readPos);
      const chunk = Buffer.allocUnsafe(Math.max(want, 0));
      const read = want > 0 ? readSync(file.fd, chunk, 0, want, file.readPos) : 0;
      if (read === 0) throw new Error(`retry watch spill ${file.path}: ${file.count} records missing`);
      file.readPos += read;
      file.carry = file.carry.length === 0 ? chunk.subarray(0, read) : Buffer.concat([file.carry, chunk.subarray(0, read)]);
    }
    if (file.count === 0) this.reset(file);
    else this.maybeCompact(file);
    return taken;
  }

  /**
   * What a snapshot needs to copy the lane's records without holding them all: the byte range of
   * the file holding them (after a flush), and the records already read into memory ahead of it.
   * Call hold() first and release() once the ranges are read.
   */
  range(lane: string): { count: number; head: Buffer; from: number; to: number } {
    const file = this.files.get(lane);
    if (!file || file.count === 0) return { count: 0, head: Buffer.alloc(0), from: 0, to: 0 };
    this.flush(file);
    return { count: file.count, head: Buffer.from(file.carry), from: file.readPos, to: file.writePos };
  }

  /** Bytes of the lane's file, as range() named them. */
  read(lane: string, from: number, length: number): Buffer {
    const file = this.files.get(lane)!;
    const chunk = Buffer.allocUnsafe(length);
    const read = readSync(file.fd, chunk, 0, length, from);
    return chunk.subarray(0, read);
  }

  hold(): void {
    this.holds++;
  }

  release(): void {
    this.holds = Math.max(0, this.holds - 1);
    if (this.holds > 0) return;
    for (const file of this.files.values()) if (file.count === 0) this.reset(file);
  }

  clear(): void {
    for (const file of this.files.values()) {
      file.count = 0;
      file.pending = [];
      file.pendingBytes = 0;
      file.carry = Buffer.alloc(0);
      // A snapshot reading the file keeps its bytes; it is started over once released.
      if (this.holds === 0) this.reset(file);
    }
    this.total = 0;
  }

  close(): void {
    for (const file of this.files.values()) closeSync(file.fd);
    this.files.clear();
    this.total = 0;
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
    this.dir = undefined;
  }

  private file(lane: string): SpillFile {
    let file = this.files.get(lane);
    if (!file) {
      if (!this.dir) {
        removeDeadProcessesFiles(this.parentDir);
        this.dir = mkdtempSync(join(this.parentDir, `${DIR_PREFIX}${process.pid}-`));
      }
      const path = join(this.dir, `${this.files.size}.spill`);
      file = new SpillFile(path, openSync(path, 'w+'));
      this.files.set(lane, file);
    }
    return file;
  }

  private flush(file: SpillFile): void {
    if (file.pendingBytes === 0) return;
    const bytes = file.pending.length === 1 ? file.pending[0]! : Buffer.concat(file.pending, file.pendingBytes);
    let written = 0;
    while (written < bytes.length) written += writeSync(file.fd, bytes, written, bytes.length - written, file.writePos + written);
    file.writePos += bytes.length;
    file.pending = [];
    file.pendingBytes = 0;
  }

  /** Nothing left in the file: start it over, so an outage's bytes are given back when it ends. */
  private reset(file: SpillFile): void {
    if (this.holds > 0 || file.pendingBytes > 0) return;
    ftruncateSync(file.fd, 0);
    file.readPos = 0;
    file.writePos = 0;
    file.carry = Buffer.alloc(0);
  }

  /** A tier that never empties (an endpoint down for days) would grow its file forever: keep only what is left. */
  private maybeCompact(file: SpillFile): void {
    if (this.holds > 0 || file.readPos < this.compactAfter || file.readPos < (file.writePos * 3) / 4) return;
    const path = `${file.path}.next`;
    const fd = openSync(path, 'w+');
    const chunk = Buffer.allocUnsafe(READ_BATCH);
    let at = 0;
    for (let from = file.readPos; from < file.writePos; ) {
      const read = readSync(file.fd, chunk, 0, Math.min(chunk.length, file.writePos - from), from);
      let written = 0;
      while (written < read) written += writeSync(fd, chunk, written, read - written, at + written);
      at += read;
      from += read;
    }
    closeSync(file.fd);
    rmSync(file.path, { force: true });
    // Renaming keeps one path per lane; the descriptor stays the new file's.
    renameSync(path, file.path);
    file.fd = fd;
    file.readPos = 0;
    file.writePos = at;
    this.compactions++;
  }
}
