import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WaitSpill } from '../../libs/stranded-retries/wait-spill.js';

describe('WaitSpill', () => {
  const record = (i: number): [string, number[]] => [i % 7 === 0 ? `resend:${i}` : randomUUID(), [i, i + 0.5, -i, i % 3 === 0 ? NaN : i * 2]];

  it('gives back every record of a lane in the order written, across reads, writes between them and a rewrite of its file', () => {
    const spill = new WaitSpill(4, undefined, 16 * 1024);
    const written: Array<[string, number[]]> = [];
    const read: Array<[string, number[]]> = [];
    let next = 0;
    // Writes and reads interleaved, in steps of odd sizes, so records are cut at the end of reads.
    for (let round = 0; round < 40; round++) {
      for (let i = 0; i < 377; i++) {
        const [key, values] = record(next++);
        spill.append('tier', key, values);
        spill.append('other', key, values);
        written.push([key, values]);
      }
      spill.take('tier', 301, (key, values) => read.push([key, values]));
    }
    expect(spill.count('tier')).toBe(written.length - read.length);
    spill.take('tier', Infinity, (key, values) => read.push([key, values]));
    expect(read).toEqual(written);
    expect(spill.compactions).toBeGreaterThan(0);
    expect(spill.count('tier')).toBe(0);
    expect(spill.size).toBe(written.length);
    // An emptied lane's file is started over; the other keeps its records.
    expect(statSync(join(spill.directory!, '0.spill')).size).toBe(0);
    const other: string[] = [];
    spill.take('other', Infinity, (key) => other.push(key));
    expect(other).toEqual(written.map(([key]) => key));
    const dir = spill.directory!;
    spill.close();
    expect(existsSync(dir)).toBe(false);
  });

  it('keeps the bytes a snapshot is copying while held, and names them with range()', () => {
    const spill = new WaitSpill(4);
    const keys: string[] = [];
    for (let i = 0; i < 1_000; i++) {
      const [key, values] = record(i);
      keys.push(key);
      spill.append('tier', key, values);
    }
    spill.take('tier', 10, () => {});
    spill.hold();
    const range = spill.range('tier');
    expect(range.count).toBe(990);
    spill.take('tier', Infinity, () => {});
    // Emptied while held: not truncated until released.
    const copied: string[] = [];
    const bytes = Buffer.concat([range.head, spill.read('tier', range.from, range.to - range.from)]);
    expect(spill.decode(bytes, (key) => copied.push(key)).records).toBe(990);
    expect(copied).toEqual(keys.slice(10));
    spill.release();
    expect(spill.bytesOnDisk()).toBe(0);
    spill.close();
  });

  it('removes the files a killed process left behind, and not those of a process that runs', () => {
    const parent = mkdtempSync(join(tmpdir(), 'spill-parent-'));
    // No process has pid 2^22+1 (the kernel's largest is 2^22); pid 1 always runs.
    const dead = join(parent, 'webhooks-retry-watch-4194305-abc');
    const running = join(parent, 'webhooks-retry-watch-1-abc');
    mkdirSync(dead);
    mkdirSync(running);
    const spill = new WaitSpill(4, parent);
    spill.append('tier', randomUUID(), [1, 2, 3, 4]);
    expect(existsSync(dead)).toBe(false);
    expect(existsSync(running)).toBe(true);
    expect(spill.directory!.startsWith(join(parent, `webhooks-retry-watch-${process.pid}-`))).toBe(true);
    spill.close();
    rmSync(parent, { recursive: true, force: true });
  });
});
