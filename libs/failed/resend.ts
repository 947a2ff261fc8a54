import { randomUUID } from 'node:crypto';
import { BrokerUnavailableError, BrokerUnroutableError, type BrokerConnection, copyProperties } from '../broker/index.js';
import { copyHeaders, HEADERS, type ScalarHeaders } from '../contracts/index.js';
import type { Logger } from '../logger/index.js';
import { type TopologyNames, topologyNames } from '../topology/index.js';
import { appendClaim, appendResolution } from './append.js';
import { type Claim, eventOf, failureIdOf, failureKeysOf, type Resolution, webhookIdOf } from './entries.js';
import type { SpooledEntry } from './entry-spool.js';
import type { FailedIndex } from './failed-index.js';
import { EntryExpiredError, readEntryAt } from './reader.js';
import { ATTR, inSpan, linkActiveSpanTo, publishSpan } from '../tracing/index.js';

/** Headers that describe past attempts: a resent webhook starts with fresh counters. */

/** The unresolved entries of one webhook, and the newest still in the stream (absent: all expired). */
interface WebhookEntries {
  offsets: number[];
  newest?: { entry: SpooledEntry; offset: number };
}

export class NothingToResendError extends Error {
  constructor() {
    super('no unresolved failed webhook for this merchant and reference');
    this.name = 'NothingToResendError';
  }
}

/**
 * Another resend holds these entries: it is under way, or its republish was not confirmed and may
 * still be delivered. Resending now could deliver twice; after `retryAfterMs` the claim's lease has
 * run out on this replica's clock.
 */
export class ResendInProgressError extends Error {
  constructor(readonly retryAfterMs: number) {
    super(`another resend holds these failed webhooks (under way, or its outcome not known yet); try again in ${Math.ceil(retryAfterMs / 1000)} s`);
    this.name = 'ResendInProgressError';
  }
}

/**
 * A republish the broker did not confirm in time, or whose channel failed before the confirm: it
 * may be stored and delivered, so its claim is kept for its lease (`holdMs`) instead of released.
 */
export class ResendOutcomeUnknownError extends BrokerUnavailableError {
  constructor(readonly holdMs: number, options?: { cause?: unknown }) {
    super('resent copy not confirmed; it may still be delivered', options);
    this.name = 'ResendOutcomeUnknownError';
  }
}

/** Every failed webhook found is of an event the merchant's webhook no longer receives; they stay failed. */
export class EventNotSubscribedError extends Error {
  constructor(readonly events: string[]) {
    super(`the webhook does not receive ${events.join(', ')}`);
    this.name = 'EventNotSubscribedError';
  }
}

export interface ResendOptions {
  now?: () => Date;
  /** Each publish of a resend (claim, republish, resolution) is confirmed within this or fails (503). */
  publishDeadlineMs?: number;
  /** Names this replica in its claims, for operators reading the stream. */
  replica?: string;
}

export interface ResendFilter {
  /** Whether the merchant's webhook receives this event now; an entry it does not is left failed. */
  receives?: (event: string) => boolean;
  /**
   * Only this webhook of the reference (the portal's Resend button, POST /nucleus/webhooks/{id}/resend):
   * the claim names only its entries, and any other webhook read back under the same hash is left alone.
   */
  webhookId?: string;
}

/**
 * Resends a merchant's failed webhooks for a reference, once, however many replicas are asked at
 * the same moment. It appends a claim naming the entries to the failed stream and waits to read it
 * back: every replica applies claims in stream order, so the first claim on an entry wins it
 * everywhere, and a later claim wins nothing (ResendInProgressError while the winner holds it,
 * NothingToResendError once it is resolved). The winner republishes one copy per webhook-id to
 * `dispatch`, each with a copy id of its own, and appends a resolution for each webhook as soon as
 * its copy is confirmed, so a resend that fails half-way is retried without sending again what
 * went out. A copy whose confirm does not come in time may still be stored: its claim is kept, not
 * released, so a retry cannot send a second copy while the first may be on its way. A claim's lease
 * frees entries whose claimant died before resolving them.
 */
export class ResendService {
  private readonly names: TopologyNames;
  private readonly now: () => Date;
  private readonly deadlineMs: number;
  /** Claims of ours with a republish still awaiting its confirm: held beyond their lease. */
  private readonly unconfirmed = new Map<string, number>();
  /** Resolution appends in flight (behind an answer, or after a late confirm); drain() waits for them. */
  private readonly resolving = new Set<Promise<void>>();

  constructor(
    private readonly broker: BrokerConnection,
    private readonly index: FailedIndex,
    prefix: string,
    private readonly logger: Logger,
    private readonly options: ResendOptions = {},
  ) {
    this.names = topologyNames(prefix);
    this.now = options.now ?? (() => new Date());
    this.deadlineMs = options.publishDeadlineMs ?? 5_000;
  }

  resend(merchantId: string, reference: string, filter: ResendFilter = {}): Promise<number> {
    // With tracing on, a span of its own (a child of the API request's) linking to each resent
    // webhook's trace; its claim, republishes and resolutions are its children.
    return inSpan('resend', { attributes: { [ATTR.merchantId]: merchantId, [ATTR.reference]: reference } }, () => this.resendOnce(merchantId, reference, filter));
  }

  private async resendOnce(merchantId: string, reference: string, filter: ResendFilter): Promise<number> {
    const offsets = filter.webhookId === undefined
      ? this.index.lookup(merchantId, reference)
      : (this.index.lookupWebhook(merchantId, filter.webhookId, [reference])?.offsets ?? []);
    if (offsets.length === 0) throw new NothingToResendError();
    // Everything held by a live claim: say so without appending a claim that can only lose.
    if (offsets.every((offset) => this.isHeld(offset))) throw this.inProgress(offsets);
    const claim = this.newClaim(merchantId, reference, offsets);
    // Read from the local spool while the claim goes round the stream: the disk is not the broker.
    const spooled = new Map(offsets.map((offset) => [offset, this.index.spooledEntryAt(offset)]));
    const won = await this.claim(claim);
    if (won.length === 0) {
      if (offsets.some((offset) => this.isHeld(offset))) throw this.inProgress(offsets);
      throw new NothingToResendError();
    }

    // Entries of one webhook share its hash (a webhook split in two by a connection drop).
    const byHash = new Map<number, number[]>();
    for (const offset of won) {
      const hash = this.index.webhookHashAt(offset) ?? -offset - 1;
      byHash.set(hash, [...(byHash.get(hash) ?? []), offset]);
    }
    let sent = 0;
    /** Resent, gone, or of unknown outcome: never given back by a release. */
    const kept = new Set<number>();
    const excluded = new Set<string>();
    try {
      for (const candidates of byHash.values()) {
        for (const group of await this.sameWebhooks(candidates, spooled)) {
          // Entries of one webhook carry the same body and webhook-id: send it once, the newest.
          if (!group.newest) {
            // Retention removed it: it cannot be resent, and every replica drops it the same way.
            this.index.resolve({ merchantId, resolved: group.offsets.map((offset) => ({ offset, references: [reference] })) });
            for (const offset of group.offsets) kept.add(offset);
            continue;
          }
          const { entry, offset } = group.newest;
          // Another webhook whose id hashes alike: not asked for, so given back by the release below.
          if (filter.webhookId !== undefined && webhookIdOf(entry) !== filter.webhookId) continue;
          const event = eventOf(entry);
          // The dispatcher would only put it back in failed: leave it there, and say why.
          if (event !== undefined && filter.receives && !filter.receives(event)) {
            excluded.add(event);
            continue;
          }
          const references = failureKeysOf(entry.properties.headers)?.references ?? [reference];
          // Every entry of the group is of this webhook: a reader of a stream declared again since
          // resolves only that webhook's entries at these offsets.
          const webhookId = webhookIdOf(entry);
          const resolution: Resolution = { merchantId, resolved: group.offsets.map((offset) => ({ offset, references, ...(webhookId ? { webhookId } : {}) })) };
          try {
            await this.republish(claim.claimId, entry, offset, resolution, reference);
          } catch (err) {
            if (err instanceof ResendOutcomeUnknownError) for (const offset of group.offsets) kept.add(offset);
            throw err;
          }
          for (const offset of group.offsets) kept.add(offset);
          sent++;
          void this.recordResolution(resolution, reference);
        }
      }
    } catch (err) {
      // Give back what was surely not resent, so a retry need not wait for the lease.
      await this.release(claim, won.filter((offset) => !kept.has(offset)));
      throw err;
    }
    // What is left are the events the webhook no longer receives: they stay failed, and free.
    await this.release(claim, won.filter((offset) => !kept.has(offset)));
    if (sent === 0) throw excluded.size > 0 ? new EventNotSubscribedError([...excluded]) : new NothingToResendError();
    this.logger.info('failed webhooks resent', { merchantId, reference, count: sent });
    return sent;
  }

  /**
   * Waits for the resolutions appended behind answers (each bounded by the publish deadline), so a
   * program that stops, or a CLI that exits, does not cut them off: every replica then frees the
   * entries at once rather than when the dispatcher's own resolution reaches it.
   */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.resolving]);
  }

  /** Held by a claim whose lease has not run out on this replica's clock, or by one of ours still unconfirmed. */
  private isHeld(offset: number): boolean {
    const hold = this.index.holdOf(offset);
    return hold !== undefined && (hold.remainingMs > 0 || this.unconfirmed.has(hold.claimId));
  }

  private inProgress(offsets: number[]): ResendInProgressError {
    let longest = 1_000;
    for (const offset of offsets) {
      const hold = this.index.holdOf(offset);
      if (!hold) continue;
      longest = Math.max(longest, this.unconfirmed.has(hold.claimId) ? this.index.claimLeaseMs : hold.remainingMs);
    }
    return new ResendInProgressError(longest);
  }

  /** Appends a claim and waits for the stream's verdict: the offsets this claim won. */
  private async claim(claim: Claim): Promise<number[]> {
    const verdict = this.index.awaitClaim(claim.claimId, 2 * this.deadlineMs);
    try {
      await this.appendClaim(claim);
    } catch (err) {
      this.index.forgetClaim(claim.claimId);
      verdict.catch(() => {});
      // Not confirmed is not "not stored": a blocked claim may land later. A release published
      // after it on the same channel lands after it too, so the entries are not held for a lease.
      // Nothing was republished yet, so giving them back cannot send twice.
      void this.appendClaim({ ...claim, takesOver: undefined, release: true }).catch(() => {});
      throw err;
    }
    return verdict;
  }

  /**
   * Gives entries back and waits until this replica has read the release, so that the merchant's
   * next request here finds them free. Best effort: an unconfirmed release leaves them to the lease.
   */
  private async release(claim: Claim, offsets: number[]): Promise<void> {
    if (offsets.length === 0) return;
    const readBack = this.index.awaitRelease(claim.claimId, this.deadlineMs);
    readBack.catch(() => {});
    try {
      await this.appendClaim({ ...claim, offsets, takesOver: undefined, release: true });
      await readBack;
    } catch {
      this.index.forgetRelease(claim.claimId);
    }
  }

  /**
   * A claim on every offset; it takes over the claims whose lease this replica saw run out, timed
   * from when it read them, except its own whose republish may still land.
   */
  private newClaim(merchantId: string, reference: string, offsets: number[]): Claim {
    const takesOver = new Set<string>();
    for (const offset of offsets) {
      const hold = this.index.holdOf(offset);
      if (hold && hold.remainingMs === 0 && !this.unconfirmed.has(hold.claimId)) takesOver.add(hold.claimId);
    }
    return {
      claimId: randomUUID(),
      merchantId,
      reference,
      at: this.now().getTime(),
      offsets,
      by: this.options.replica,
      ...(takesOver.size > 0 ? { takesOver: [...takesOver] } : {}),
    };
  }

  /**
   * Splits offsets whose webhook-ids hash alike into webhooks, by the webhook-ids the entries
   * really carry. `newest` is the entry to republish, absent when retention removed it. `spooled`
   * holds the reads of the local spool begun before the claim; what it lacks is read from the stream.
   */
  private async sameWebhooks(offsets: number[], spooled: ReadonlyMap<number, Promise<SpooledEntry | undefined>>): Promise<WebhookEntries[]> {
    const read = async (offset: number): Promise<SpooledEntry | undefined> => {
      const local = await (spooled.get(offset) ?? this.index.spooledEntryAt(offset));
      if (local) return local;
      try {
        return await readEntryAt(this.broker, this.names.failed, offset);
      } catch (err) {
        if (err instanceof EntryExpiredError) return undefined;
        throw err;
      }
    };
    const groups = new Map<string, WebhookEntries>();
    for (const offset of offsets) {
      const entry = await read(offset);
      const id = (entry && webhookIdOf(entry)) ?? `offset:${offset}`;
      const group = groups.get(id) ?? { offsets: [] };
      group.offsets.push(offset);
      if (entry) group.newest = { entry, offset };
      groups.set(id, group);
    }
    return [...groups.values()];
  }

  private appendClaim(claim: Claim): Promise<void> {
    return publishSpan(this.names.failed, undefined, {}, () => appendClaim(this.broker, this.names.failed, claim, this.deadlineMs), claim.release ? 'release' : 'claim');
  }

  /**
   * The copy is in `dispatch`: whatever happens to this append, it is sent, and the dispatcher's
   * own resolution (on the copy's first handling) covers a lost one. So the answer does not wait
   * for it (a confirm round trip off every resend) and a failed append is logged, not answered
   * 503; this replica forgets the entries at once, and the claim keeps the others from sending
   * them again until a resolution reaches them. Published on the channel the claim and any release
   * use, it lands between them in stream order.
   */
  private recordResolution(resolution: Resolution, reference: string): Promise<void> {
    this.index.resolve(resolution);
    const append = () => appendResolution(this.broker, this.names.failed, resolution, { reference, resentAt: this.now(), deadlineMs: this.deadlineMs });
    const appended = publishSpan(this.names.failed, undefined, {}, append, 'resolve').catch((err: unknown) => {
      this.logger.warn('resolution of a resent webhook not recorded; the dispatcher records it', {
        merchantId: resolution.merchantId,
        reference,
        error: (err as Error).message,
      });
    });
    this.resolving.add(appended);
    void appended.finally(() => this.resolving.delete(appended));
    return appended;
  }

  /**
   * Publishes a fresh copy with confirms. Resolves when confirmed. Throws BrokerUnavailableError
   * when surely nothing was stored (not connected, or no queue took it), ResendOutcomeUnknownError
   * when it may have been: no confirm within the deadline, or a channel failure before it.
   */
  private async republish(claimId: string, entry: SpooledEntry, offset: number, resolution: Resolution, reference: string): Promise<void> {
    const headers: ScalarHeaders = copyHeaders(entry.properties.headers, { from: 'failure-entry' });
    headers[HEADERS.resentAt] = this.now().toISOString();
    headers[HEADERS.resentFromOffset] = offset;
    // The copy's key in the retries journal: the entry's own id, since after a deletion of `failed`
    // another entry can sit at the same offset, and its resend would be taken for this one's twin.
    const failureId = failureIdOf(entry, offset);
    if (failureId !== undefined) headers[HEADERS.resentFromId] = failureId;
    // The dispatcher delivers the first copy of a resent entry it sees and drops any other copy id.
    headers[HEADERS.copyId] = randomUUID();
    if (!this.broker.isConnected) throw new BrokerUnavailableError('not connected to RabbitMQ; nothing was resent');
    // No deadline on the publish itself: a confirm that comes after the answer still settles it.
    // The copy keeps the webhook's own traceparent (its attempts stay in the webhook's trace); the resend's span links to it.
    const webhookId = headers[HEADERS.webhookId] as string | undefined;
    linkActiveSpanTo(entry.properties.headers, webhookId ? { [ATTR.webhookId]: webhookId } : undefined);
    const publish = publishSpan(this.names.dispatch, undefined, webhookId ? { [ATTR.webhookId]: webhookId } : {}, () =>
      this.broker.sendToQueue(this.names.dispatch, entry.content, copyProperties(entry.properties, headers, webhookId)),
    );
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), this.deadlineMs);
    });
    try {
      const first = await Promise.race([publish.then(() => 'confirmed' as const), late]);
      if (first === 'confirmed') return;
    } catch (err) {
      if (err instanceof BrokerUnroutableError) throw new BrokerUnavailableError('no queue took the resent copy', { cause: err });
      // Nacked or its channel closed: the broker may have stored it all the same.
      this.logger.warn('resent copy not confirmed; its claim holds for its lease', { merchantId: resolution.merchantId, reference, error: (err as Error).message });
      throw new ResendOutcomeUnknownError(this.index.claimLeaseMs, { cause: err });
    } finally {
      clearTimeout(timer);
    }
    this.followLateConfirm(claimId, publish, resolution, reference);
    throw new ResendOutcomeUnknownError(this.index.claimLeaseMs);
  }

  /** A copy still awaiting its confirm: resolved once the broker confirms it, held until then. */
  private followLateConfirm(claimId: string, publish: Promise<void>, resolution: Resolution, reference: string): void {
    this.unconfirmed.set(claimId, (this.unconfirmed.get(claimId) ?? 0) + 1);
    const meta = { merchantId: resolution.merchantId, reference };
    publish
      .then(
        async () => {
          this.logger.info('late resent copy confirmed', meta);
          await this.recordResolution(resolution, reference);
        },
        (err: unknown) => this.logger.warn('late resent copy failed; its claim holds for its lease', { ...meta, error: (err as Error).message }),
      )
      .finally(() => {
        const left = (this.unconfirmed.get(claimId) ?? 1) - 1;
        if (left > 0) this.unconfirmed.set(claimId, left);
        else this.unconfirmed.delete(claimId);
      });
  }
}
