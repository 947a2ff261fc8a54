import { randomUUID } from 'node:crypto';
import { KeyedLanes } from '../../libs/stranded-retries/keyed-lanes.js';
import { OffsetClock } from '../../libs/stranded-retries/offset-clock.js';
import { uuidToWords, wordsToUuid } from '../../libs/stranded-retries/uuid-words.js';

describe('UUID words', () => {
  it('turn a canonical UUID into four words and back exactly, and refuse anything else', () => {
    const words = new Uint32Array(4);
    for (let i = 0; i < 100; i++) {
      const id = randomUUID();
      expect(uuidToWords(id, words, 0)).toBe(true);
      expect(wordsToUuid(words, 0)).toBe(id);
    }
    expect(uuidToWords('00000000-0000-0000-0000-000000000000', words, 0)).toBe(true);
    expect(wordsToUuid(words, 0)).toBe('00000000-0000-0000-0000-000000000000');
    for (const other of ['resend:12', randomUUID().toUpperCase(), `${randomUUID()}x`, 'evt_1-wait', '']) expect(uuidToWords(other, words, 0)).toBe(false);
  });
});

describe('KeyedLanes', () => {
  it('holds what a Map would, in the order added per lane, through growth, holes and shrinking', () => {
    const store = new KeyedLanes(2);
    const lanes = [store.lane('a'), store.lane('b'), store.lane('c')];
    const model = new Map<string, { lane: number; values: [number, number] }>();
    let n = 0;
    // A deterministic mix: mostly adds, deletions near the head and anywhere, raw keys now and then.
    let seed = 7;
    const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
    for (let step = 0; step < 60_000; step++) {
      const r = random();
      if (r < 0.55 || model.size === 0) {
        const key = random() < 0.05 ? `resend:${n}` : randomUUID();
        const lane = lanes[Math.floor(random() * 3)]!;
        const values: [number, number] = [n, n * 2];
        n++;
        store.add(lane, key, values);
        model.set(key, { lane, values });
      } else {
        // Near the head of a lane most of the time, as arrivals are.
        const lane = lanes[Math.floor(random() * 3)]!;
        let victim: string | undefined;
        const skip = r < 0.9 ? 0 : Math.floor(random() * 50);
        let seen = 0;
        store.forEach(lane, (handle) => {
          if (seen++ < skip) return;
          victim = store.keyOf(handle);
          return false;
        });
        if (victim === undefined) continue;
        store.delete(store.get(victim)!);
        model.delete(victim);
      }
      if (step % 20_000 === 0 || step === 59_999) {
        expect(store.size).toBe(model.size);
        for (const [key, { lane, values }] of model) {
          const handle = store.get(key);
          expect(handle).toBeDefined();
          expect(store.laneOf(handle!)).toBe(lane);
          expect([store.value(handle!, 0), store.value(handle!, 1)]).toEqual(values);
          expect(store.keyOf(handle!)).toBe(key);
        }
        for (const lane of lanes) {
          const order: number[] = [];
          store.forEach(lane, (handle) => void order.push(store.value(handle, 0)));
          expect(order).toEqual([...model.values()].filter((m) => m.lane === lane).map((m) => m.values[0]));
        }
      }
    }
    // Emptied, it gives its memory back.
    const full = store.bytesHeld();
    for (const key of [...model.keys()]) store.delete(store.get(key)!);
    expect(store.size).toBe(0);
    expect(store.bytesHeld()).toBeLessThan(full);
    expect(store.get(randomUUID())).toBeUndefined();
  });

  it('exports a lane and imports it into another store as it was', () => {
    const from = new KeyedLanes(1);
    const lane = from.lane('tier');
    const keys = Array.from({ length: 1_000 }, (_, i) => (i % 100 === 0 ? `raw-${i}` : randomUUID()));
    keys.forEach((key, i) => from.add(lane, key, [i]));
    const { keys: words, columns, raw } = from.exportLane(lane);
    const to = new KeyedLanes(1);
    to.importLane(to.lane('tier'), words, columns, new Map(raw));
    keys.forEach((key, i) => expect(to.value(to.get(key)!, 0)).toBe(i));
    expect(to.size).toBe(1_000);
  });

  it('holds about 100 bytes per record of four columns at a million records', () => {
    const store = new KeyedLanes(4);
    const lane = store.lane('tier');
    for (let i = 0; i < 1_000_000; i++) store.add(lane, randomUUID(), [i, i, i, i]);
    expect(store.bytesHeld() / 1_000_000).toBeLessThan(130);
  });
});

describe('OffsetClock', () => {
  it('answers the read time of the last sample at or before an offset, never a later one', () => {
    const clock = new OffsetClock(10);
    for (let offset = 0; offset < 100; offset++) clock.read(offset, offset * 3);
    expect(clock.readAtOf(0)).toBe(0);
    for (let offset = 0; offset < 100; offset++) {
      expect(clock.readAtOf(offset)!).toBeLessThanOrEqual(offset * 3);
      expect(clock.readAtOf(offset)!).toBeGreaterThan(offset * 3 - 10);
    }
    clock.forgetBefore(150);
    expect(clock.readAtOf(10)).toBeUndefined();
  });
});
