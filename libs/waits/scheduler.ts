import type { Channel } from 'amqplib';
import type { BrokerConnection } from '../broker/index.js';
import { HEADERS, type ScalarHeaders } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { throttledWarning } from '../runtime/batcher.js';
import { Periodic } from '../runtime/periodic.js';
import { isDataRefusal } from '../delivery-store/refusals.js';
import { writeApart } from '../runtime/apart.js';
import { SetAsideWaits } from './set-aside.js';
import type { CircuitKey } from './circuits.js';
import type { HandedWait, WaitKey, WaitStore } from './store.js';

/** Rows picked per statement, and ready messages in dispatch above which nothing more is handed back. */
export const WAIT_PICK_BATCH = 500;
export const WAIT_MAX_READY = 10_000;
/** Picked batches whose publishes may await their confirms at once. */
export const WAIT_BATCHES_CONFIRMING = 4;
/** A closed circuit's parked waits made due per statement, and at most due at once. */
export const WAIT_UNPARK_BATCH = 500;

export interface WaitSchedulerOptions {
  dispatch: string;
  /** How long a hand-back may take to come to its attempt before the row hands it on again. */
  leaseMs: number;
  batch?: number;
  /** The longest time from one pick's start to the next's (default 200 ms). */
  pollMs?: number;
  maxReady?: number;
}

/** A hand-back not confirmed within this fails, and its wait is due again at once. */
const PUBLISH_DEADLINE_MS = 5_000;

/** Hands due waits back to `dispatch`, up to `maxReady` ready there: a backlog waits in rows, not in the broker. */
export class WaitScheduler {
  readonly stats = { handed: 0, unconfirmed: 0, parked: 0, setAside: 0 };
  private readonly setAside = new SetAsideWaits();
  private readonly circuitsAside = new SetAsideWaits<CircuitKey>();
  private readonly loop = new Periodic(() => this.round(), () => this.options.pollMs ?? 200, {
    failed: (err) => {
      this.problem('waits not handed back; trying again', err);
      return 1_000;
    },
  });
  private channel?: Channel;
  private readonly problem = throttledWarning((message, fields) => this.logger.warn(message, fields));
  /** Batches published and not yet all confirmed, and the hand-backs in them. */
  private readonly confirming = new Set<Promise<void>>();
  private unconfirmed = 0;
  private unparking?: Promise<void>;

  constructor(
    private readonly store: WaitStore,
    private readonly broker: BrokerConnection,
    private readonly logger: Logger,
    private readonly options: WaitSchedulerOptions,
  ) {}

  start(): void {
    void this.loop.start();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
    await this.unparking;
    await Promise.all(this.confirming);
    await this.channel?.close().catch(() => {});
    this.channel = undefined;
  }

  private async round(): Promise<number> {
    const started = Date.now();
    const handed = await this.tick();
    if (this.confirming.size >= WAIT_BATCHES_CONFIRMING) await Promise.race(this.confirming);
    // A full batch: more are due, go again at once, while its confirms are still coming.
    if (handed >= (this.options.batch ?? WAIT_PICK_BATCH)) return 0;
    // A period, not a gap.
    return Math.max(0, (this.options.pollMs ?? 200) - (Date.now() - started));
  }

  /** Returns the waits picked. The probes go out first: a close or pick failing then left them unsent. */
  private async tick(): Promise<number> {
    if (!this.broker.isConnected) return 0;
    const room = Math.min(this.options.batch ?? WAIT_PICK_BATCH, (this.options.maxReady ?? WAIT_MAX_READY) - (await this.ready()) - this.unconfirmed);
    if (room <= 0) return 0;
    let probed = 0;
    const idle: CircuitKey[] = [];
    // Made apart when PostgreSQL refuses one parked row: it held back every circuit's probe.
    await this.dueApart(
      this.circuitsAside,
      (among) => this.store.probe(among.only?.length ?? room, this.options.leaseMs, among),
      (without) => this.store.probesDue(room, without),
      (probes) => {
        probed += this.send(probes.handed);
        idle.push(...probes.idle);
      },
      "circuit's probe not made: PostgreSQL refuses one of its parked waits; left as it is, out of the probes and unparks for a minute",
    );
    if (idle.length > 0) await this.store.closeCircuits(idle);
    const picked = await this.pick(room - probed);
    this.unpark();
    // Rows parked behind an open circuit count as picked: more may be due behind them.
    return probed + picked;
  }

  /** One pick, its hand-backs sent; returns the waits picked or parked. Made apart when PostgreSQL refuses one row. */
  private async pick(limit: number): Promise<number> {
    let picked = 0;
    await this.dueApart(
      this.setAside,
      (among) => this.store.pick(among.only?.length ?? limit, this.options.leaseMs, among),
      (without) => this.store.due(limit, without),
      ({ handed, parked }) => {
        this.stats.parked += parked;
        picked += this.send(handed) + parked;
      },
      'wait not picked: PostgreSQL refuses it; left in its row, out of the pick for a minute',
    );
    return picked;
  }

  /** One statement over what is due; one PostgreSQL refuses for one row is made again apart, that key set aside. */
  private async dueApart<K extends WaitKey | CircuitKey, R>(
    aside: SetAsideWaits<K>,
    run: (among: { only?: K[]; without: K[] }) => Promise<R>,
    due: (without: K[]) => Promise<K[]>,
    took: (result: R) => void,
    message: string,
  ): Promise<void> {
    const without = aside.keys();
    try {
      return took(await run({ without }));
    } catch (err) {
      if (!isDataRefusal(err)) throw err;
    }
    await writeApart(await due(without), (only) => run({ only, without }), isDataRefusal, {
      written: (_, result) => took(result),
      refused: (key, err) => {
        aside.add(key);
        this.stats.setAside++;
        this.logger.error(message, { ...key, error: (err as Error)?.message ?? String(err) });
      },
    });
  }

  /** Publishes the hand-backs of one statement, counted as ready until confirmed; returns how many. */
  private send(waits: readonly HandedWait[]): number {
    if (waits.length === 0) return 0;
    this.unconfirmed += waits.length;
    const confirmed: Promise<void> = Promise.all(waits.map((wait) => this.handBack(wait))).then(() => {
      this.unconfirmed -= waits.length;
      this.confirming.delete(confirmed);
    });
    this.confirming.add(confirmed);
    return waits.length;
  }

  /** Closed circuits' parked waits made due again beside the picks, until a round makes none due. */
  private unpark(): void {
    this.unparking ??= (async () => {
      // A round per closing circuit; one PostgreSQL refuses is found apart and set aside, or it held back the rest.
      let more = true;
      while (more && this.loop.running) {
        more = false;
        await this.dueApart(
          this.circuitsAside,
          (among) => this.store.unparkClosed(WAIT_UNPARK_BATCH, among),
          (without) => this.store.closingCircuits(WAIT_PICK_BATCH, without),
          (unparked) => void (more ||= unparked),
          "circuit's unpark not made: PostgreSQL refuses one of its parked waits; left as it is, out of the probes and unparks for a minute",
        );
      }
    })()
      .catch((err: unknown) => this.problem('parked waits of a closed circuit not made due again; trying again', err))
      .finally(() => (this.unparking = undefined));
  }

  private async handBack(wait: HandedWait): Promise<void> {
    try {
      await this.broker.sendToQueue(
        this.options.dispatch,
        wait.content,
        { persistent: true, contentType: 'application/json', messageId: wait.webhookId, headers: handBackHeaders(wait) },
        PUBLISH_DEADLINE_MS,
      );
      this.stats.handed++;
    } catch (err) {
      this.stats.unconfirmed++;
      this.problem('wait not handed back: dispatch did not confirm it; it is due again', err);
      await this.store.unhand(wait).catch(() => {});
    }
  }

  /** Messages ready in dispatch (0 when it cannot be asked: the pick's limit still bounds a tick). */
  private async ready(): Promise<number> {
    try {
      this.channel ??= await this.broker.createChannel();
      return (await this.channel.checkQueue(this.options.dispatch)).messageCount;
    } catch {
      await this.channel?.close().catch(() => {});
      this.channel = undefined;
      return 0;
    }
  }
}

/** The wait's headers, and its key and hand from the row: one that cannot pass intake can still end its wait. */
function handBackHeaders(wait: HandedWait): ScalarHeaders {
  return {
    ...wait.headers,
    [HEADERS.merchantId]: wait.merchantId,
    ...(wait.endpointId ? { [HEADERS.endpointId]: wait.endpointId } : {}),
    [HEADERS.waitHand]: wait.hand,
    ...(wait.probe ? { [HEADERS.circuitProbe]: true } : {}),
  };
}
