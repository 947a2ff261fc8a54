import { closeSync, openSync, readdirSync, readlinkSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MessageProperties } from 'amqplib';
import { EntrySpool, type SpooledEntry } from '../../libs/failed/entry-spool.js';

function entry(i: number, size = 100): SpooledEntry {
  return {
    content: Buffer.alloc(size, String(i % 10)),
    properties: {
      messageId: `evt_${i}`,
      contentType: 'application/json',
      timestamp: 1_700_000_000 + i,
      headers: { 'x-entry-type': 'failure', 'x-reference': `ref_${i}`, 'x-attempts': i, 'x-raw': Buffer.from([i & 255]), 'x-list': ['a', i] },
    } as unknown as MessageProperties,
  };
}

describe('the failed entry spool', () => {
  let dir: string;
  const spools: EntrySpool[] = [];

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'spool-test-'));
  });

  afterEach(async () => {
    for (const spool of spools.splice(0)) await spool.close();
    await rm(dir, { recursive: true, force: true });
  });

  function open(maxBytes = 64 * 1024 * 1024): EntrySpool {
    const spool = new EntrySpool({ maxBytes, dir });
    spools.push(spool);
    return spool;
  }

  it('gives back every entry as it was put, at sparse offsets, leaving no file to be seen', async () => {
    const spool = open();
    const offsets: number[] = [];
    for (let i = 0; i < 1_000; i++) {
      const offset = i * 3 + (i % 2);
      offsets.push(offset);
      spool.put(offset, entry(i, 50 + (i % 7) * 40));
    }
    expect(readdirSync(dir)).toEqual([]);
    for (const [i, offset] of offsets.entries()) {
      const got = await spool.get(offset);
      expect(got).toEqual(entry(i, 50 + (i % 7) * 40));
      // amqplib writes a header as bytes only when it is a Buffer.
      expect(Buffer.isBuffer(got!.content)).toBe(true);
      expect(Buffer.isBuffer(got!.properties.headers!['x-raw'])).toBe(true);
    }
    // Offsets never put: between two entries, before the first, after the last.
    expect(await spool.get(1)).toBeUndefined();
    expect(await spool.get(-5)).toBeUndefined();
    expect(await spool.get(10_000)).toBeUndefined();
  });

  it('answers a read made while the entry is still on its way to the disk', async () => {
    const spool = open();
    const reads: Promise<SpooledEntry | undefined>[] = [];
    for (let i = 0; i < 200; i++) {
      spool.put(i, entry(i));
      reads.push(spool.get(i));
    }
    const got = await Promise.all(reads);
    expect(got).toEqual(got.map((_, i) => entry(i)));
  });

  it('keeps a re-read entry as first spooled, and ignores offsets behind the last one', async () => {
    const spool = open();
    spool.put(5, entry(5));
    spool.put(5, entry(99));
    spool.put(3, entry(3));
    expect(await spool.get(5)).toEqual(entry(5));
    expect(await spool.get(3)).toBeUndefined();
  });

  it('drops its older half when full and keeps answering for the newer', async () => {
    const spool = open(1024 * 1024); // two halves of 512 KiB; 1,000 records of ~1.2 KiB fill more than both
    for (let i = 0; i < 1_000; i++) spool.put(i, entry(i, 1_000));
    expect(await spool.get(0)).toBeUndefined();
    expect(await spool.get(999)).toEqual(entry(999, 1_000));
    let kept = 0;
    for (let i = 0; i < 1_000; i++) if (await spool.get(i)) kept++;
    // Between one half and both halves of the disk allowed.
    expect(kept).toBeGreaterThan(350);
    expect(kept).toBeLessThan(900);
    // What is kept is the newest, contiguous to the end.
    expect(await spool.get(1_000 - kept)).toEqual(entry(1_000 - kept, 1_000));
  });

  it('forgets entries that retention removed and starts over when the stream is made again', async () => {
    const spool = open();
    for (let i = 0; i < 100; i++) spool.put(i, entry(i));
    spool.forgetBefore(50);
    expect(await spool.get(49)).toBeUndefined();
    expect(await spool.get(50)).toEqual(entry(50));
    spool.clear();
    expect(await spool.get(60)).toBeUndefined();
    // The new stream's offsets start at 0 again.
    spool.put(0, entry(1_000));
    expect(await spool.get(0)).toEqual(entry(1_000));
  });

  it('stops answering for a file whose write failed, and spools what comes after into a new one', async () => {
    const spool = open();
    for (let i = 0; i < 10; i++) spool.put(i, entry(i));
    expect(await spool.get(9)).toEqual(entry(9));
    // The disk fails the next write: the spool's file descriptor is taken away under it.
    const fds = readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`).startsWith(dir);
      } catch {
        return false;
      }
    });
    expect(fds).toHaveLength(1);
    closeSync(Number(fds[0]));
    // Holds the number, so that the spool's own close of it later closes this and nothing else.
    openSync('/dev/null', 'r');
    spool.put(10, entry(10));
    expect(await spool.get(10)).toBeUndefined();
    expect(await spool.get(9)).toBeUndefined();
    spool.put(11, entry(11));
    expect(await spool.get(11)).toEqual(entry(11));
  });

  it('turns itself off, saying so, when it cannot make its next file, and never throws to the index', async () => {
    const errors: Error[] = [];
    const gone = await mkdtemp(join(tmpdir(), 'spool-gone-'));
    const spool = new EntrySpool({ maxBytes: 1024 * 1024, dir: gone, onError: (err) => errors.push(err) });
    spools.push(spool);
    spool.put(0, entry(0, 1_000));
    expect(await spool.get(0)).toEqual(entry(0, 1_000));
    await rm(gone, { recursive: true });
    // Enough to fill the first half: the next record needs a new file in a directory that is gone.
    for (let i = 1; i < 1_000; i++) spool.put(i, entry(i, 1_000));
    expect(errors).toHaveLength(1);
    expect(errors[0]!.message).toContain('ENOENT');
    expect(await spool.get(0)).toBeUndefined();
    expect(await spool.get(999)).toBeUndefined();
    spool.clear();
    spool.put(1_000, entry(1_000));
    expect(await spool.get(1_000)).toBeUndefined();
  });

  it('refuses an entry larger than half its disk, and answers nothing once closed (close is safe twice)', async () => {
    const spool = open(2 * 1024 * 1024);
    spool.put(0, entry(0, 1_100_000));
    spool.put(1, entry(1));
    expect(await spool.get(0)).toBeUndefined();
    expect(await spool.get(1)).toEqual(entry(1));
    await spool.close();
    await spool.close();
    expect(await spool.get(1)).toBeUndefined();
    spool.put(2, entry(2));
  });
});
