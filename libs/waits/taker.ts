import { isDataRefusal } from '../delivery-store/refusals.js';
import { writeApart } from '../runtime/apart.js';
import { WriteRefusedError } from '../runtime/batcher.js';
import { takeKey, type WaitEnd, type WaitStore } from './store.js';

/** 'spent': taken past WAIT_TAKE_LIMIT, to be parked; 'ended': an ordered wait whose place ended, its wait to end. */
export type TakeResult = 'taken' | 'spent' | 'ended' | 'stale';

interface Asked {
  take: WaitEnd & { again?: boolean };
  resolve(taken: TakeResult): void;
  reject(err: unknown): void;
}

/** Batches the takes: one turn's, or those asked while a statement is out; a refused row rejects alone. */
export class WaitTaker {
  private next: Asked[] = [];
  private taking = false;

  constructor(private readonly store: WaitStore, private readonly leaseMs: number) {}

  take(take: WaitEnd & { again?: boolean }): Promise<TakeResult> {
    return new Promise((resolve, reject) => {
      this.next.push({ take, resolve, reject });
      if (this.taking) return;
      this.taking = true;
      // After the current burst of deliveries: the hand-backs in it go in the same statement.
      setImmediate(() => void this.drain());
    });
  }

  private async drain(): Promise<void> {
    while (this.next.length > 0) {
      const batch = this.next;
      this.next = [];
      const told = new Set<Asked>();
      try {
        await writeApart(batch, (part) => this.store.take(part.map((asked) => asked.take), this.leaseMs), isDataRefusal, {
          written: (part, taken) => part.forEach((asked) => (told.add(asked), asked.resolve(taken.get(takeKey(asked.take)) ?? 'stale'))),
          refused: (asked, err) => (told.add(asked), asked.reject(new WriteRefusedError(err))),
        });
      } catch (err) {
        for (const asked of batch) if (!told.has(asked)) asked.reject(err);
      }
    }
    this.taking = false;
  }
}
