import type { Database, Listener } from './database.js';

export interface ListeningHandlers {
  heard(payload: string): void;
  /**
   * After each (re)start of the LISTEN, on the listening connection: what was announced while it was
   * away is read here. Notifications heard meanwhile are held until it settles, so none goes before it.
   */
  connected(listener: Listener): Promise<void> | void;
  /** A listen, or a `connected`, that threw: told for the first of a run of failures only. */
  failed?(err: unknown): void;
}

/** LISTEN on `channel` on a connection of its own until stop(), made again after each loss (250 ms, doubling to 5 s). */
export function keepListening(db: Pick<Database, 'listen'>, channel: string, handlers: ListeningHandlers) {
  let stopped = false;
  let listener: Listener | undefined;
  void (async () => {
    for (let attempt = 0; !stopped; ) {
      try {
        let held: string[] | undefined = [];
        listener = await db.listen(channel, (payload) => (held ? void held.push(payload) : handlers.heard(payload)));
        if (stopped) return void (await listener.close());
        await handlers.connected(listener);
        for (const payload of held) handlers.heard(payload);
        held = undefined;
        attempt = 0;
        await listener.lost;
      } catch (err) {
        await listener?.close();
        if (attempt === 0) handlers.failed?.(err);
      }
      if (stopped) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(5_000, 250 * 2 ** attempt++)).unref());
    }
  })();
  return {
    async stop(): Promise<void> {
      stopped = true;
      await listener?.close();
    },
  };
}

export type Listening = ReturnType<typeof keepListening>;
