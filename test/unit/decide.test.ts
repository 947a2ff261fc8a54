import { decide, type Decision, type Finding } from '../../apps/dispatcher/stages/decide.js';
import type { IntakeEvent } from '../../apps/dispatcher/stages/intake.js';
import { WebhookBlockedError, WebhookNetworkError, WebhookRejectedError, WebhookTimeoutError } from '../../libs/http/index.js';
import { RetryPolicy } from '../../libs/retry-policy/index.js';

const now = new Date('2026-01-01T12:00:00.000Z');
const secondsAgo = (s: number) => new Date(now.getTime() - s * 1000).toISOString();
// Tiers of 1 s, 10 s, 60 s: a span of 71 s.
const policy = new RetryPolicy({ delaysMs: [1_000, 10_000, 60_000], maxDeferrals: 3 });

function intake(over: Partial<IntakeEvent> = {}): IntakeEvent {
  const base: IntakeEvent = {
    merchantId: 'm_1',
    event: 'charge.completed',
    references: ['ref_1'],
    body: '{}',
    webhookId: 'evt_1',
    attempts: 0,
    deferrals: 0,
    postponements: 0,
    firstSeenAt: secondsAgo(5),
    accepted: false,
  };
  const merged = { ...base, ...over };
  merged.accepted = over.accepted ?? (merged.attempts > 0 || merged.deferrals > 0 || merged.postponements > 0 || merged.resentAt !== undefined);
  return merged;
}

const circuit = (retryInMs: number, lastError?: string): Finding => ({ kind: 'circuit-open', failures: 5, retryInMs, lastError });
const failedWith = (error: Error): Finding => ({ kind: 'attempt-failed', error: error as never });

type Case = [string, Finding, IntakeEvent | undefined, Decision];
const cases: Case[] = [
  ['a 2xx answer is delivered', { kind: 'sent', status: 204 }, intake({ attempts: 2 }), { kind: 'delivered', attempt: 3, status: 204 }],
  ['a later copy of a wait is superseded', { kind: 'superseded', key: 's_1' }, undefined, { kind: 'superseded', key: 's_1' }],
  ['a webhook of a deleted merchant is dropped, accepted or not', { kind: 'erased', merchantId: 'm_1', webhookId: 'w_1' }, intake({ attempts: 2, resentAt: '2026-01-01T00:00:00.000Z' }), { kind: 'erased', merchantId: 'm_1', webhookId: 'w_1' }],
  ['a message that fails intake is invalid with its code', { kind: 'invalid', code: 'not-json', detail: 'x' }, undefined, { kind: 'invalid', code: 'not-json', detail: 'x' }],
  ['a delivery stopped while waiting for a slot goes back untried', { kind: 'stopping' }, intake(), { kind: 'returned' }],
  ['a new event for an unknown merchant is invalid', { kind: 'unavailable', why: 'merchant-removed' }, intake(), { kind: 'invalid', code: 'unknown-merchant', detail: 'no merchant m_1 in the directory' }],
  ['a new event for a disabled webhook is skipped', { kind: 'unavailable', why: 'webhook-disabled' }, intake(), { kind: 'skipped', why: 'webhook-disabled' }],
  ['a new event for an endpoint disabled for failing is skipped as endpoint-disabled', { kind: 'unavailable', why: 'endpoint-disabled' }, intake(), { kind: 'skipped', why: 'endpoint-disabled' }],
  [
    'a retrying webhook whose endpoint was disabled for failing fails, resendable, as endpoint-disabled',
    { kind: 'unavailable', why: 'endpoint-disabled' },
    intake({ attempts: 3 }),
    { kind: 'failed', reason: 'endpoint-disabled', attempts: 3, error: 'endpoint disabled: every attempt failed for ENDPOINT_DISABLE_AFTER', attempted: false },
  ],
  ['a new event the webhook does not receive is skipped', { kind: 'unavailable', why: 'event-not-subscribed' }, intake(), { kind: 'skipped', why: 'event-not-subscribed' }],
  [
    'a retrying webhook whose merchant left fails, resendable, without an attempt',
    { kind: 'unavailable', why: 'merchant-removed' },
    intake({ attempts: 1 }),
    { kind: 'failed', reason: 'merchant-removed', attempts: 1, error: 'merchant removed from the directory', attempted: false },
  ],
  [
    'a resent webhook whose webhook was disabled fails as webhook-disabled',
    { kind: 'unavailable', why: 'webhook-disabled' },
    intake({ resentAt: secondsAgo(1) }),
    { kind: 'failed', reason: 'webhook-disabled', attempts: 0, error: 'webhook disabled', attempted: false },
  ],
  ['a busy endpoint defers a first delivery to step 0', { kind: 'busy' }, intake(), { kind: 'defer', step: 0 }],
  // Busy is not failing: the endpoint answers, so a retry comes back after the first delay too. In
  // its own step's delay, one deferred at its 5th attempt waited hours for a slot, and 20 deferrals
  // outlasted the schedule's whole span without an attempt.
  ['a busy endpoint defers a retry after two attempts to step 0 too', { kind: 'busy' }, intake({ attempts: 2 }), { kind: 'defer', step: 0 }],
  ['a busy endpoint defers a retry at the last step to step 0', { kind: 'busy' }, intake({ attempts: 3 }), { kind: 'defer', step: 0 }],
  ['an open circuit postpones to the first step that outlasts the cooldown', circuit(5_000), intake(), { kind: 'postpone', step: 1 }],
  ['an open circuit with a cooldown beyond every step postpones to the last', circuit(600_000), intake(), { kind: 'postpone', step: 2 }],
  [
    'an open circuit after the span fails as circuit-open with the endpoint error',
    circuit(5_000, 'HTTP 500'),
    intake({ firstSeenAt: secondsAgo(71) }),
    { kind: 'failed', reason: 'circuit-open', attempts: 0, error: 'circuit open: the endpoint failed 5 times in a row; last error: HTTP 500', status: undefined, attempted: false },
  ],
  [
    "an open circuit after the span keeps the webhook's own last error and status",
    circuit(5_000, 'HTTP 500'),
    intake({ attempts: 1, firstSeenAt: secondsAgo(100), lastError: 'HTTP 502', lastStatus: 502 }),
    { kind: 'failed', reason: 'circuit-open', attempts: 1, error: 'HTTP 502', status: 502, attempted: false },
  ],
  ['a resend starts the span over: an open circuit postpones it', circuit(5_000), intake({ firstSeenAt: secondsAgo(1000), resentAt: secondsAgo(1) }), { kind: 'postpone', step: 1 }],
  ['a first failed attempt retries in step 0', failedWith(new WebhookRejectedError(500)), intake(), { kind: 'retry', step: 0, attempt: 1, error: 'HTTP 500', errorClass: 'http_500', status: 500 }],
  ['a timeout retries with no status', failedWith(new WebhookTimeoutError(100)), intake({ attempts: 1 }), { kind: 'retry', step: 1, attempt: 2, error: 'timeout after 100 ms', errorClass: 'timeout', status: undefined }],
  ['a 429 with Retry-After 30 s waits in the first step of at least 30 s', failedWith(new WebhookRejectedError(429, '30')), intake(), { kind: 'retry', step: 2, attempt: 1, error: 'HTTP 429', errorClass: 'http_429', status: 429 }],
  ['a 503 with a Retry-After shorter than the step keeps the step', failedWith(new WebhookRejectedError(503, '0')), intake({ attempts: 1 }), { kind: 'retry', step: 1, attempt: 2, error: 'HTTP 503', errorClass: 'http_503', status: 503 }],
  ['a 503 with a Retry-After beyond the schedule waits in the last step', failedWith(new WebhookRejectedError(503, '86400')), intake(), { kind: 'retry', step: 2, attempt: 1, error: 'HTTP 503', errorClass: 'http_503', status: 503 }],
  // What a server may send that is no delay-seconds nor HTTP-date: the schedule's own step, never a wait before it or an error.
  // Nor text that names a year ahead ('Retry in 2099'): a lenient date parser read it as that date, the last step.
  ...(['-30', '-1', '1.5', 'soon', '30 seconds', '1e3', 'Infinity', '', 'Retry in 2099', 'May 2099', '2099-01-01'].map((value) => [
    `a 429 with a Retry-After of ${JSON.stringify(value)} keeps the schedule's step`, failedWith(new WebhookRejectedError(429, value)), intake(), { kind: 'retry', step: 0, attempt: 1, error: 'HTTP 429', errorClass: 'http_429', status: 429 },
  ]) as Case[]),
  // Huge: the schedule's last step, never beyond it (docs/limits.md, "waits between attempts").
  ...(['99999999999999999999999999', 'Fri, 31 Dec 9999 23:59:59 GMT'].map((value) => [
    `a 503 with a Retry-After of ${value} waits in the last step`, failedWith(new WebhookRejectedError(503, value)), intake(), { kind: 'retry', step: 2, attempt: 1, error: 'HTTP 503', errorClass: 'http_503', status: 503 },
  ]) as Case[]),
  ['a Retry-After on a 500 is ignored', failedWith(new WebhookRejectedError(500, '30')), intake(), { kind: 'retry', step: 0, attempt: 1, error: 'HTTP 500', errorClass: 'http_500', status: 500 }],
  [
    'an HTTP-date Retry-After without a Date counts from now',
    failedWith(new WebhookRejectedError(429, new Date(now.getTime() + 5_000).toUTCString())),
    intake(),
    { kind: 'retry', step: 1, attempt: 1, error: 'HTTP 429', errorClass: 'http_429', status: 429 },
  ],
  // RFC 9110 §10.2.3: an HTTP-date is on the server's clock, so it counts from the response's own
  // Date. Read against ours, a server 10 minutes behind asked for no wait at all, and one 10 minutes
  // ahead for the schedule's last step.
  [
    "an HTTP-date Retry-After counts from the response's Date on a server 10 minutes behind",
    failedWith(new WebhookRejectedError(429, new Date(now.getTime() - 600_000 + 30_000).toUTCString(), new Date(now.getTime() - 600_000).toUTCString())),
    intake(),
    { kind: 'retry', step: 2, attempt: 1, error: 'HTTP 429', errorClass: 'http_429', status: 429 },
  ],
  [
    "an HTTP-date Retry-After counts from the response's Date on a server 10 minutes ahead",
    failedWith(new WebhookRejectedError(503, new Date(now.getTime() + 600_000 + 5_000).toUTCString(), new Date(now.getTime() + 600_000).toUTCString())),
    intake(),
    { kind: 'retry', step: 1, attempt: 1, error: 'HTTP 503', errorClass: 'http_503', status: 503 },
  ],
  [
    'an HTTP-date Retry-After with an unreadable Date counts from now',
    failedWith(new WebhookRejectedError(429, new Date(now.getTime() + 5_000).toUTCString(), 'yesterday')),
    intake(),
    { kind: 'retry', step: 1, attempt: 1, error: 'HTTP 429', errorClass: 'http_429', status: 429 },
  ],
  [
    'the last attempt of the schedule fails as attempts-exhausted',
    failedWith(new WebhookNetworkError('ECONNREFUSED', 'refused')),
    intake({ attempts: 3 }),
    { kind: 'failed', reason: 'attempts-exhausted', attempts: 4, error: 'ECONNREFUSED: refused', errorClass: 'connection_refused', status: undefined, attempted: true },
  ],
  [
    "a test event's failed attempt is its only one: it fails as attempts-exhausted, never retried",
    failedWith(new WebhookRejectedError(503, '1')),
    intake({ test: true }),
    { kind: 'failed', reason: 'attempts-exhausted', attempts: 1, error: 'HTTP 503', errorClass: 'http_503', status: 503, attempted: true },
  ],
  ['a test event is still postponed by an open circuit, which spends no attempt', circuit(5_000), intake({ test: true }), { kind: 'postpone', step: 1 }],
  [
    'a blocked address fails at once, never retried',
    failedWith(new WebhookBlockedError('10.0.0.1 is private')),
    intake(),
    { kind: 'failed', reason: 'blocked', attempts: 1, error: 'blocked: 10.0.0.1 is private', errorClass: 'blocked_address', status: undefined, attempted: true },
  ],
];

describe('decide: the one decision of the delivery path', () => {
  it.each(cases)('%s', (_name, finding, event, expected) => {
    expect(decide(finding, event, policy, now)).toEqual(expected);
  });

  it('with an empty schedule, a failed first attempt fails as attempts-exhausted and a busy endpoint is waited for', () => {
    const single = new RetryPolicy({ delaysMs: [] });
    expect(decide(failedWith(new WebhookRejectedError(500)), intake(), single, now)).toMatchObject({ kind: 'failed', reason: 'attempts-exhausted', attempts: 1 });
    expect(single.canDefer(0)).toBe(false);
  });

  it('allows deferring until maxDeferrals', () => {
    expect(policy.canDefer(2)).toBe(true);
    expect(policy.canDefer(3)).toBe(false);
  });

  it('errors that are not attempts are not DeliveryFailedErrors: an open circuit or a removed webhook has no attempt', () => {
    const failed = decide({ kind: 'unavailable', why: 'webhook-disabled' }, intake({ attempts: 2 }), policy, now);
    expect(failed).toMatchObject({ kind: 'failed', attempted: false, attempts: 2 });
  });
});
