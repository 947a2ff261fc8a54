import { randomUUID } from 'node:crypto';
import type { ConsumeMessage } from 'amqplib';
import type { BrokerConnection } from '../broker/index.js';
import { HEADERS, JOURNAL_ENTRY_TYPES } from '../contracts/index.js';
import { readEntryAt } from '../failed/reader.js';
import type { Logger } from '../logger/index.js';
import { ReadBacks, StreamTail } from '../streams/index.js';
import { appendRecoveryClaim, recoveredCopy } from './journal.js';

export interface RetryWatchOptions {
  /** The dispatch queue, where a recovered message goes back. */
  dispatch: string;
  /** How long past its due time a wait counts as stuck; also the lease of a recovery claim. */
  overdueAfterMs: number;
  /** How often overdue waits are looked for. */
  checkEveryMs?: number;
  /** Waits recovered per check at most, so that a tier that failed wholesale comes back in a stream, not a flood. */
  maxPerCheck?: number;
  /** Waits older than this are gone from the journal (its retention) and dropped from the watch. */
  retentionMs?: number;
  now?: () => number;
}

interface Waiting {
  offset: number;
  dueAt: number;
  queue: string;
}

interface Held {
  claimId: string;
  at: number;
}

/**
 * Tails the retries journal and knows every message waiting in a retry tier: where it waits, when
 * it is due, and whether it came back. A tier whose dead-lettering stalls (RabbitMQ 3.10 and 4.x
 * both have had at-least-once dead-letter workers stuck after a leader change) would hold its
 * messages past their time; the watch puts a copy of each back in dispatch once it is
 * `overdueAfterMs` late. Several dispatchers run a watch each: a recovery is claimed in the
 * journal and the first claim in stream order wins, so one copy is made. When the stuck original
 * comes out at last, `isSuperseded` tells the dispatcher to drop it.
 */
export class RetryWatch {
  readonly stats = { recovered: 0 };
  private readonly waiting = new Map<string, Waiting>();
  /** The winning recovery claim of a wait, kept after it arrived: the original may still come out. */
  private readonly claims = new Map<string, Held>();
  private readonly claimWaiters = new ReadBacks<string[]>();
  private readonly tail: StreamTail;
  private timer?: NodeJS.Timeout;
  private checking?: Promise<void>;
  private stopped = false;
  private readonly now: () => number;

  constructor(
    private readonly broker: BrokerConnection,
    private readonly stream: string,
    private readonly logger: Logger,
    private readonly options: RetryWatchOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.tail = new StreamTail(broker, stream, logger, {
      prefetch: 2_000,
      onEntry: (message, offset) => this.apply(message, offset),
      onCaughtUp: (offset) => this.logger.info('retries journal caught up', { waiting: this.waiting.size, offset }),
    });
  }

  /** Caught up with the journal: what it says is waiting is what is waiting. */
  get ready(): boolean {
    return this.tail.ready;
  }

  async start(): Promise<void> {
    await this.tail.start();
    this.timer = setInterval(() => {
      this.checking ??= this.check().finally(() => {
        this.checking = undefined;
      });
    }, this.options.checkEveryMs ?? 5_000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.checking;
    await this.tail.stop();
  }

  /**
   * True for a message its tier handed back after the watch had already put a copy back: the copy
   * is the one that counts. `recoveredBy` is the message's own x-recovered-by, if it is a copy.
   */
  isSuperseded(scheduleId: string, recoveredBy: string | undefined): boolean {
    const held = this.claims.get(scheduleId);
    return held !== undefined && held.claimId !== recoveredBy;
  }

  /** Messages in each tier, ready or held by the broker, that have not come back yet. */
  waitingByQueue(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const wait of this.waiting.values()) counts.set(wait.queue, (counts.get(wait.queue) ?? 0) + 1);
    return counts;
  }

  /** Of those, the ones more than `overdueAfterMs` past due. */
  overdueByQueue(): Map<string, number> {
    const counts = new Map<string, number>();
    const late = this.now() - this.options.overdueAfterMs;
    for (const wait of this.waiting.values()) if (wait.dueAt <= late) counts.set(wait.queue, (counts.get(wait.queue) ?? 0) + 1);
    return counts;
  }

  private apply(message: ConsumeMessage, offset: number): void {
    const headers = message.properties.headers ?? {};
    const scheduleId = headers[HEADERS.scheduleId];
    switch (headers[HEADERS.entryType]) {
      case JOURNAL_ENTRY_TYPES.scheduled: {
        const dueAt = headers[HEADERS.dueAt];
        const queue = headers[HEADERS.retryQueue];
        if (typeof scheduleId === 'string' && typeof dueAt === 'number' && typeof queue === 'string') this.waiting.set(scheduleId, { offset, dueAt, queue });
        return;
      }
      case JOURNAL_ENTRY_TYPES.arrived:
        if (typeof scheduleId === 'string') this.waiting.delete(scheduleId);
        return;
      case JOURNAL_ENTRY_TYPES.recovery:
        this.applyClaim(headers, message.content);
        return;
      default:
        return;
    }
  }

  /** First claim wins a wait that is still waiting; one whose lease ran out can be taken over. */
  private applyClaim(headers: Record<string, unknown>, content: Buffer): void {
    const claimId = headers[HEADERS.claimId];
    const at = headers[HEADERS.dueAt];
    if (typeof claimId !== 'string' || typeof at !== 'number') return;
    let ids: unknown;
    try {
      ids = (JSON.parse(content.toString('utf8')) as { scheduleIds?: unknown }).scheduleIds;
    } catch {
      return;
    }
    const won: string[] = [];
    for (const id of Array.isArray(ids) ? ids : []) {
      if (typeof id !== 'string' || !this.waiting.has(id)) continue;
      const held = this.claims.get(id);
      if (held && at - held.at < this.options.overdueAfterMs) continue;
      this.claims.set(id, { claimId, at });
      won.push(id);
    }
    this.claimWaiters.settle(claimId, won);
  }

  /** Finds overdue waits, claims them, and puts back a copy of each one this watch won. */
  async check(): Promise<void> {
    if (this.stopped || !this.broker.isConnected) return;
    const now = this.now();
    this.forgetExpired(now);
    if (!this.ready) return;
    const late = now - this.options.overdueAfterMs;
    const overdue: string[] = [];
    for (const [id, wait] of this.waiting) {
      if (wait.dueAt > late) continue;
      const held = this.claims.get(id);
      if (held && now - held.at < this.options.overdueAfterMs) continue;
      overdue.push(id);
      if (overdue.length >= (this.options.maxPerCheck ?? 500)) break;
    }
    if (overdue.length === 0) return;
    const claimId = randomUUID();
    let won: string[];
    try {
      const readBack = this.claimWaiters.expect(claimId, 10_000, `recovery claim from ${this.stream}`);
      await appendRecoveryClaim(this.broker, this.stream, { claimId, at: now, scheduleIds: overdue }, 10_000);
      won = await readBack;
    } catch (err) {
      this.claimWaiters.forget(claimId);
      this.logger.warn('overdue retries not claimed; trying again at the next check', { overdue: overdue.length, error: (err as Error).message });
      return;
    }
    for (const id of won) await this.recover(id, claimId, now);
  }

  private async recover(scheduleId: string, claimId: string, now: number): Promise<void> {
    const wait = this.waiting.get(scheduleId);
    if (!wait) return; // arrived while the claim was read back
    try {
      const entry = await readEntryAt(this.broker, this.stream, wait.offset);
      const { properties } = entry;
      await this.broker.sendToQueue(
        this.options.dispatch,
        entry.content,
        {
          persistent: true,
          contentType: properties.contentType,
          messageId: properties.messageId,
          timestamp: properties.timestamp,
          headers: recoveredCopy(properties.headers ?? {}, claimId),
        },
        10_000,
      );
      this.stats.recovered++;
      this.logger.warn('retry recovered: its tier did not hand it back in time', {
        queue: wait.queue,
        scheduleId,
        overdueMs: now - wait.dueAt,
        merchantId: properties.headers?.[HEADERS.merchantId],
        webhookId: properties.headers?.[HEADERS.webhookId],
      });
    } catch (err) {
      // The claim's lease runs out and the next check claims it again.
      this.logger.warn('overdue retry not recovered; trying again after the claim lease', { queue: wait.queue, scheduleId, error: (err as Error).message });
    }
  }

  /** What retention removed from the journal cannot be recovered: stop counting it. */
  private forgetExpired(now: number): void {
    const horizon = now - (this.options.retentionMs ?? 7 * 86_400_000);
    for (const [id, wait] of this.waiting) {
      if (wait.dueAt >= horizon) break; // roughly in due order; the rest go at a later check
      this.waiting.delete(id);
      this.logger.warn('waiting retry older than the journal retention forgotten', { queue: wait.queue, scheduleId: id });
    }
    for (const [id, held] of this.claims) {
      if (held.at >= horizon) break;
      this.claims.delete(id);
    }
  }
}
