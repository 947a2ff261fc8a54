import type { Admitted } from '../../../apps/dispatcher/stages/admission.js';
import { AttemptStage } from '../../../apps/dispatcher/stages/attempt.js';
import type { IntakeEvent } from '../../../apps/dispatcher/stages/intake.js';
import { type WebhookHttpClient, type WebhookRequest, WebhookRejectedError, WebhookTimeoutError } from '../../../libs/http/index.js';
import { noopObserver } from '../../../libs/metrics/index.js';
import { WebhookSigner } from '../../../libs/signing/index.js';
import { merchant } from './fakes.js';

const now = new Date('2026-01-01T12:00:00Z');
const intake: IntakeEvent = {
  merchantId: 'm_1', event: 'charge.completed', references: ['r'], body: '{"event":"charge.completed","data":{}}', webhookId: 'evt_1',
  attempts: 0, deferrals: 0, postponements: 0, firstSeenAt: now.toISOString(), accepted: false,
};

function admitted(released: string[]): Admitted {
  return { kind: 'admitted', webhook: merchant().endpoints[0]!, slot: { kind: 'send', release: (result) => released.push(result) } };
}

function stage(answer: (request: WebhookRequest) => Promise<{ status: number; headers: Record<string, string> }>) {
  const requests: WebhookRequest[] = [];
  const http: WebhookHttpClient = { post: (r) => (requests.push(r), answer(r)), close: () => {} };
  return { attempt: new AttemptStage(http, new WebhookSigner(), noopObserver, { deliveryTimeoutMs: 1_000, userAgent: 'test' }), requests };
}

describe('attempt', () => {
  it('POSTs the body signed, finds it sent on 2xx and releases the slot as succeeded', async () => {
    const released: string[] = [];
    const { attempt, requests } = stage(async () => ({ status: 204, headers: {} }));
    expect(await attempt.run(intake, admitted(released), now)).toEqual({ kind: 'sent', status: 204, trace: { startedAt: now, durationMs: expect.any(Number), responseBody: undefined } });
    expect(released).toEqual(['succeeded']);
    expect(requests[0]!.body).toBe(intake.body);
    expect(requests[0]!.headers['webhook-signature']).toMatch(/^v1,/);
    expect(requests[0]!.headers['webhook-id']).toBe('evt_1');
  });

  it('finds a non-2xx answer a failed attempt with its Retry-After; a 404 is rejected for the breaker, a 503 failed', async () => {
    const released: string[] = [];
    const { attempt } = stage(async (r) => ({ status: r.url.endsWith('x') ? 404 : 503, headers: { 'retry-after': '7' } }));
    const found = await attempt.run(intake, admitted(released), now);
    expect(found).toMatchObject({ kind: 'attempt-failed' });
    const error = (found as { error: WebhookRejectedError }).error;
    expect(error).toBeInstanceOf(WebhookRejectedError);
    expect([error.status, error.retryAfter]).toEqual([503, '7']);
    expect(released).toEqual(['failed']);
  });

  it("keeps the response's Date with its Retry-After: an HTTP-date counts from it", async () => {
    const date = 'Thu, 01 Jan 2026 11:50:00 GMT';
    const { attempt } = stage(async () => ({ status: 429, headers: { 'retry-after': 'Thu, 01 Jan 2026 11:50:30 GMT', date } }));
    const error = ((await attempt.run(intake, admitted([]), now)) as { error: WebhookRejectedError }).error;
    expect([error.status, error.date]).toEqual([429, date]);
  });

  it('finds a timeout a failed attempt', async () => {
    const { attempt } = stage(async () => {
      throw new WebhookTimeoutError(1_000);
    });
    expect(await attempt.run(intake, admitted([]), now)).toMatchObject({ kind: 'attempt-failed', error: expect.any(WebhookTimeoutError) });
  });

  it('throws an error that is not a failed attempt, its slot released', async () => {
    const released: string[] = [];
    const { attempt } = stage(async () => {
      throw new TypeError('bug');
    });
    await expect(attempt.run(intake, admitted(released), now)).rejects.toThrow('bug');
    expect(released).toEqual(['failed']);
  });
});
