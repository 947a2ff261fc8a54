/** Something with a deadline, linked into a Deadlines list while it runs. */
export interface Deadlined {
  deadline: number;
  newer: Deadlined | undefined;
  older: Deadlined | undefined;
  expire(): void;
}

/** Every attempt's deadline under one timer (a timer per request cost more CPU than the rest of the client). */
export class Deadlines {
  private oldest: Deadlined | undefined;
  private newest: Deadlined | undefined;
  private timer: NodeJS.Timeout | undefined;
  private armedFor = Infinity;
  private readonly sweep = () => this.expireDue();

  add(item: Deadlined, timeoutMs: number): void {
    const deadline = performance.now() + timeoutMs;
    item.deadline = deadline;
    let before = this.newest;
    while (before && before.deadline > deadline) before = before.older;
    item.older = before;
    item.newer = before ? before.newer : this.oldest;
    if (item.newer) item.newer.older = item;
    else this.newest = item;
    if (before) before.newer = item;
    else this.oldest = item;
    if (deadline < this.armedFor) this.arm(deadline);
  }

  /** Safe to call for an item that expired or was removed already. */
  remove(item: Deadlined): void {
    if (item.older) item.older.newer = item.newer;
    else if (this.oldest === item) this.oldest = item.newer;
    else return;
    if (item.newer) item.newer.older = item.older;
    else this.newest = item.older;
    item.older = item.newer = undefined;
  }

  close(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.armedFor = Infinity;
  }

  private arm(at: number): void {
    clearTimeout(this.timer);
    this.armedFor = at;
    this.timer = setTimeout(this.sweep, Math.max(1, Math.ceil(at - performance.now())));
    this.timer.unref();
  }

  private expireDue(): void {
    this.timer = undefined;
    this.armedFor = Infinity;
    const now = performance.now();
    while (this.oldest && this.oldest.deadline <= now) {
      const due = this.oldest;
      this.remove(due);
      due.expire();
    }
    if (this.oldest) this.arm(this.oldest.deadline);
  }
}
