import { describe, expect, it } from '@jest/globals';
import { writeApart } from '../../libs/runtime/apart.js';
import { SetAsideWaits, WAIT_SET_ASIDE_MS } from '../../libs/waits/set-aside.js';

const refusedErr = Object.assign(new Error('refused'), { code: 'P0001' });
const outage = Object.assign(new Error('terminating connection'), { code: '57P01' });
const isRefused = (err: unknown) => err === refusedErr;

/** A statement that refuses any part holding one of `poison`, and fails as an outage any holding one of `down`. */
function statement(poison: number[], down: number[] = []) {
  const parts: number[][] = [];
  return {
    parts,
    write: async (items: number[]) => {
      parts.push(items);
      if (items.some((i) => down.includes(i))) throw outage;
      if (items.some((i) => poison.includes(i))) throw refusedErr;
      return items.length;
    },
  };
}

describe('a batch PostgreSQL refuses for one row (writeApart)', () => {
  it('is halved until the refused row stands alone: every other row written in order, in about 2·log2(n) statements', async () => {
    const items = Array.from({ length: 512 }, (_, i) => i);
    const { parts, write } = statement([300]);
    const written: number[] = [];
    const refused: number[] = [];
    await writeApart(items, write, isRefused, { written: (part) => written.push(...part), refused: (item) => refused.push(item) });
    expect(refused).toEqual([300]);
    expect(written).toEqual(items.filter((i) => i !== 300));
    expect(parts.length).toBeLessThanOrEqual(2 * Math.log2(items.length) + 1);
  });

  it('stops at an outage met halfway, having told only what was done: the rest is the caller to try again', async () => {
    // The whole batch refused (row 2), then PostgreSQL goes away while the second half is written.
    const { write: refusing } = statement([2]);
    const write = (items: number[]) => (items.length < 8 && items.includes(6) ? Promise.reject(outage) : refusing(items));
    const told: Array<[string, number[]]> = [];
    const thrown = await writeApart([0, 1, 2, 3, 4, 5, 6, 7], write, isRefused, {
      written: (part) => told.push(['written', part]),
      refused: (item) => told.push(['refused', [item]]),
    }).catch((err: unknown) => err);
    expect(thrown).toBe(outage);
    expect(told).toEqual([['written', [0, 1]], ['refused', [2]], ['written', [3]]]);
  });

  it('starts with the halves when the caller tells the whole was refused already (refusedWith): no second statement of the whole', async () => {
    const { parts, write } = statement([2]);
    const refused: Array<[number, unknown]> = [];
    await writeApart([0, 1, 2, 3], write, isRefused, { written: () => {}, refused: (item, err) => refused.push([item, err]) }, { err: refusedErr });
    expect(parts).toEqual([[0, 1], [2, 3], [2], [3]]);
    expect(refused).toEqual([[2, refusedErr]]);
    // One item refused already is told so at once.
    const alone = statement([9]);
    const told: Array<[number, unknown]> = [];
    await writeApart([9], alone.write, isRefused, { written: () => {}, refused: (item, err) => told.push([item, err]) }, { err: refusedErr });
    expect(alone.parts).toEqual([]);
    expect(told).toEqual([[9, refusedErr]]);
  });

  it('never splits on an outage: thrown at once', async () => {
    const { parts, write } = statement([], [3]);
    await expect(writeApart([0, 1, 2, 3], write, isRefused, { written: () => {}, refused: () => {} })).rejects.toBe(outage);
    expect(parts).toEqual([[0, 1, 2, 3]]);
  });
});

describe('a wait whose pick PostgreSQL refused (SetAsideWaits)', () => {
  it('is left out of the pick for WAIT_SET_ASIDE_MS, then tried again', () => {
    let now = 1_000;
    const setAside = new SetAsideWaits(() => now);
    const key = { merchantId: 'm', webhookId: 'evt', endpointId: 'ep' };
    setAside.add(key);
    now += WAIT_SET_ASIDE_MS - 1;
    expect(setAside.keys()).toEqual([key]);
    now += 1;
    expect(setAside.keys()).toEqual([]);
    expect(setAside.size).toBe(0);
  });
});
