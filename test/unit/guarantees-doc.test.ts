import { readFileSync } from 'node:fs';
import { INVALID_CODES } from '../../libs/contracts/index.js';
import { dropExpiredPartitions, type Queryable } from '../../libs/delivery-store/index.js';
import { RESEND_CONFIRM_DEADLINE_MS } from '../../libs/failed/resend.js';
import { CLAIM_LEASE_MS, RESENDS_PER_WEBHOOK_PER_DAY } from '../../libs/failed/store.js';
import { DELIVERIES_MAX_BYTES, DELIVERIES_RETENTION, DISPATCH_DELIVERY_LIMIT } from '../../libs/topology/spec.js';

/**
 * The claims of docs/guarantees.md and docs/publishing.md that a check can hold to the code: which
 * retention deletes a failed webhook, the resend caps and deadlines, the deliveries stream's bounds,
 * and the codes a parked message can carry.
 */
const flat = (path: string) => readFileSync(path, 'utf8').replace(/\s+/g, ' ');
const guarantees = flat('docs/guarantees.md');
const publishing = readFileSync('docs/publishing.md', 'utf8');

describe('docs/guarantees.md', () => {
  it('names the bound that really deletes a failed webhook: the delivery log retention, applied by the recorder', async () => {
    const statements: Array<{ text: string; params?: unknown[] }> = [];
    const db: Queryable = {
      query: async <R>(text: string, params?: unknown[]) => {
        statements.push({ text, params });
        return { rows: [] as R[] };
      },
    };
    const retentionMs = 30 * 86_400_000;
    const now = new Date('2026-11-27T12:00:00.000Z');
    await dropExpiredPartitions(db, retentionMs, now);
    const deletion = statements.find((s) => /DELETE FROM failed_webhooks/.test(s.text));
    expect(deletion?.text).toMatch(/WHERE failed_at < \$1/);
    expect(deletion?.params).toEqual([new Date(now.getTime() - retentionMs).toISOString()]);
    expect(guarantees).toContain('**The bound that decides is `DELIVERY_LOG_RETENTION` (30 days) from the failure**');
    expect(guarantees).toContain('`FAILED_RETENTION` (30 days) bounds only the `failed` stream');
  });

  it('states the resend cap, the claim lease and the confirm deadline as the code has them', () => {
    expect(guarantees).toContain(`**At most ${RESENDS_PER_WEBHOOK_PER_DAY} resends of one webhook in 24 hours**`);
    expect(guarantees).toContain(`the ${RESENDS_PER_WEBHOOK_PER_DAY + 1}th answers 429`);
    expect(guarantees).toContain(`A claim is a ${CLAIM_LEASE_MS / 1000} s lease`);
    expect(guarantees).toContain(`a copy the broker did not confirm within ${RESEND_CONFIRM_DEADLINE_MS / 1000} s`);
  });

  it('states the deliveries stream\'s bounds and the delivery limit as the code has them', () => {
    expect(DELIVERIES_RETENTION).toMatch(/^\d+D$/);
    expect(guarantees).toContain(`keeps at most ${parseInt(DELIVERIES_RETENTION, 10)} days and ${DELIVERIES_MAX_BYTES / 1e9} GB`);
    expect(guarantees).toContain(`after ${DISPATCH_DELIVERY_LIMIT} returns to \`dispatch\``);
  });

  it('lists every code a parked message can carry, and no other, here and in publishing.md', () => {
    const listed = /never sent to a merchant: (.*?`delivery-limit`)/.exec(guarantees)?.[1] ?? '';
    expect(new Set([...listed.matchAll(/`([a-z]+(?:-[a-z]+)+)`/g)].map((m) => m[1]))).toEqual(new Set(INVALID_CODES));
    const section = publishing.split('## What gets a message parked')[1] ?? '';
    // The rows, not the header (`x-invalid-code`).
    const table = [...section.matchAll(/^\| `([a-z-]+)` \|/gm)].map((m) => m[1]).filter((code) => !code!.startsWith('x-'));
    expect(table.sort()).toEqual([...INVALID_CODES].sort());
  });
});
