import { readFileSync } from 'node:fs';
import type { Decision, Finding } from '../../apps/dispatcher/stages/decide.js';
import type { IntakeEvent } from '../../apps/dispatcher/stages/intake.js';
import { decide } from '../../apps/dispatcher/stages/decide.js';
import { route } from '../../apps/dispatcher/stages/fan-out.js';
import { recordOf } from '../../apps/dispatcher/stages/record.js';
import type { Merchant, MerchantDirectory } from '../../libs/merchants/index.js';
import { RetryPolicy } from '../../libs/retry-policy/index.js';

/**
 * docs/delivery-log.md tells merchants what each record of a webhook means: every reason the
 * dispatcher writes on a wait that spent no attempt is explained there, and a wait written without
 * a next attempt time is said to have none; a skipped delivery's endpoint is what the list says.
 */
const doc = readFileSync('docs/delivery-log.md', 'utf8').replace(/\s+/g, ' ');
const now = new Date('2026-01-01T12:00:00.000Z');
const policy = new RetryPolicy({ delaysMs: [1_000, 10_000, 60_000], maxDeferrals: 3 });
const intake: IntakeEvent = {
  merchantId: 'm_1', event: 'payout', references: ['po-1'], body: '{}', webhookId: 'evt_1', endpointId: 'ep_1',
  attempts: 1, deferrals: 0, postponements: 0, firstSeenAt: now.toISOString(), accepted: true,
};
const finding: Finding = { kind: 'busy' };

const waits: Array<[string, Decision]> = [
  ['a busy endpoint', { kind: 'defer', step: 0 }],
  ['a throttled endpoint', { kind: 'throttle', delayMs: 500 }],
  ['a webhook behind an earlier one of its reference', { kind: 'ordered' }],
  ['an open circuit', { kind: 'postpone', step: 0 }],
];

describe('docs/delivery-log.md', () => {
  it.each(waits)('explains the record of a wait for %s: its outcome and its reason', (_what, decision) => {
    const record = recordOf(intake, finding, decision, policy, now)!;
    const named = (text: string) => ({ text, named: doc.includes(text) });
    expect([named(`\`${record.outcome}\``), named(`\`${record.reason}\``)]).toEqual([{ text: `\`${record.outcome}\``, named: true }, { text: `\`${record.reason}\``, named: true }]);
    // A wait with no time says when it ends instead.
    if (record.nextAttemptAt === undefined) expect({ reason: record.reason, saysNoTime: new RegExp(`\`${record.reason}\`[^.]*no \`nextAttemptAt\``).test(doc) }).toEqual({ reason: record.reason, saysNoTime: true });
  });

  it('says which deliveries have no endpoint: a webhook none of the merchant\'s endpoints takes is skipped without one', () => {
    const merchant: Merchant = { id: 'm_1', publicKey: 'pk_test_m_1', endpoints: [{ id: 'ep_1', url: 'https://m1.example/hooks', enabled: false, secret: 'whsec_x' }] };
    const directory = { byId: (id: string) => (id === merchant.id ? merchant : undefined) } as unknown as MerchantDirectory;
    const fresh: IntakeEvent = { ...intake, endpointId: undefined, attempts: 0, accepted: false };
    const found = route(fresh, directory)!;
    const record = recordOf(fresh, found, decide(found, fresh, policy, now), policy, now)!;
    expect([record.outcome, record.endpointId]).toEqual(['skipped', undefined]);
    expect({ saysSkippedHaveNone: /`null` on deliveries recorded before endpoints and on skipped ones/.test(doc) }).toEqual({ saysSkippedHaveNone: true });
  });
});
