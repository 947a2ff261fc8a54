import type { Queryable } from '../delivery-store/index.js';
import type { ScalarHeaders } from '../contracts/index.js';

/**
 * Order per reference, gating on rows (migration 0008): an ordered merchant's webhook has a row of
 * `webhook_order` from intake until it ends, in its key's line by an identity PostgreSQL assigns
 * under the key's lock. Only the head of a line goes to an attempt; the others wait as
 * `webhook_waits` rows with reason 'ordered' and no pick time until the head ends, which makes
 * the next one due in the same transaction. All of it is webhook_order_step(), one round trip.
 */

/** A new webhook of an ordered merchant at intake, with what its wait says if it must wait. */
export interface OrderAdmit {
  merchantId: string;
  webhookId: string;
  key: string;
  /** The headers its 'ordered' wait carries to its hand-back (attempts 0, first seen, x-ordered). */
  headers: ScalarHeaders;
  /** Its bytes as received, stored once with the wait. */
  content: Buffer;
}

/** An ordered webhook that ended (delivered, failed, skipped): its row goes, the next of its key is due. */
export interface OrderEnd {
  merchantId: string;
  webhookId: string;
}

/** A webhook's name in step()'s answer. */
export function orderId(merchantId: string, webhookId: string): string {
  return `${merchantId}\u001f${webhookId}`;
}

export class OrderStore {
  constructor(private readonly db: Queryable) {}

  /**
   * Ends then admits, in one statement; returns the admitted webhooks that are their key's head
   * (to be attempted now). One that is not (behind an earlier one, or already waiting: a
   * redelivery) is written as a wait, or found already written.
   */
  async step(admits: readonly OrderAdmit[], ends: readonly OrderEnd[]): Promise<Set<string>> {
    const { rows } = await this.db.query<{ admitted_merchant: string; admitted: string; head: boolean }>('SELECT admitted_merchant, admitted, head FROM webhook_order_step($1, $2, $3, $4, $5, $6, $7)', [
      admits.map((a) => a.merchantId),
      admits.map((a) => a.key),
      admits.map((a) => a.webhookId),
      admits.map((a) => JSON.stringify(a.headers)),
      admits.map((a) => a.content.toString('hex')),
      ends.map((e) => e.merchantId),
      ends.map((e) => e.webhookId),
    ]);
    // Keyed by merchant too: two merchants may publish one messageId.
    const heads = new Set<string>();
    for (const row of rows) if (row.head) heads.add(orderId(row.admitted_merchant, row.admitted));
    return heads;
  }
}
