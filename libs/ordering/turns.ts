/** Taken when a message is consumed; a walk that will not ask passes, or the later ones wait for ever. */
export interface OrderTurn {
  readonly come: Promise<void>;
  /** Its ask is queued, or it will not ask. Twice is once. */
  pass(): void;
  /** A turn of its own for one more walk of the message (a fan-out's share): this one's passes once each has passed too. */
  share(): OrderTurn;
}

const FIRST: Promise<void> = Promise.resolve();

/** Each turn comes once the one of its reference taken before it passed. */
export class OrderTurns {
  private readonly last = new Map<string, Promise<void>>();

  take(reference: string): OrderTurn {
    const before = this.last.get(reference);
    let passed!: () => void;
    const own = new Promise<void>((resolve) => (passed = resolve));
    // Passed when it and every earlier turn have: one passed before its predecessor comes holds the next back still.
    const all = before ? Promise.all([before, own]).then(() => undefined) : own;
    this.last.set(reference, all);
    void all.then(() => {
      if (this.last.get(reference) === all) this.last.delete(reference);
    });
    return new Turn(before ?? FIRST, { holders: 0, passed });
  }
}

class Turn implements OrderTurn {
  private done = false;

  constructor(readonly come: Promise<void>, private readonly shared: { holders: number; passed: () => void }) {
    shared.holders++;
  }

  pass(): void {
    if (this.done) return;
    this.done = true;
    if (--this.shared.holders === 0) this.shared.passed();
  }

  share(): OrderTurn {
    // Passed, it may have let the next of its reference ask already.
    if (this.done) throw new Error('order: a turn shared after it passed');
    return new Turn(this.come, this.shared);
  }
}
