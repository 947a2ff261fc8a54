import { DeliveryFailedError, WebhookRejectedError, type WebhookHttpClient } from '../../../libs/http/index.js';
import { type MerchantDirectory, signingSecrets } from '../../../libs/merchants/index.js';
import type { DeliveryObserver } from '../../../libs/metrics/index.js';
import type { WebhookSigner } from '../../../libs/signing/index.js';
import type { Admitted } from './admission.js';
import type { Finding } from './decide.js';
import type { AttemptResult } from './endpoint-guards.js';
import type { IntakeEvent } from './intake.js';
import type { Span } from '../../../libs/tracing/index.js';
import { attemptSpan, endAttempt } from './trace.js';

export interface AttemptSettings {
  deliveryTimeoutMs: number;
  userAgent: string;
}

/** The attempt: sign, POST, and tell the endpoint's guards how it went; an error that is not a failed attempt (a bug) is thrown, its slot released. */
export class AttemptStage {
  constructor(
    private readonly http: WebhookHttpClient,
    private readonly signer: WebhookSigner,
    private readonly observer: DeliveryObserver,
    private readonly settings: AttemptSettings,
    private readonly merchants?: Pick<MerchantDirectory, 'clock'>,
  ) {}

  async run(intake: IntakeEvent, { webhook, slot }: Admitted, now: Date, span?: Span): Promise<Finding> {
    const started = performance.now();
    let responseBody: string | undefined;
    try {
      // A replaced secret's grace by PostgreSQL's clock, which stamped it; the timestamp is this host's.
      const signed = this.signer.sign(signingSecrets(webhook, this.merchants?.clock?.() ?? now), intake.webhookId, intake.body, now);
      const request = {
        url: webhook.url, body: intake.body, timeoutMs: this.settings.deliveryTimeoutMs,
        // One literal of a fixed shape: no copy per delivery.
        headers: {
          'content-type': 'application/json', 'user-agent': this.settings.userAgent, 'webhook-id': signed['webhook-id'],
          'webhook-timestamp': signed['webhook-timestamp'], 'webhook-signature': signed['webhook-signature'],
        } as Record<string, string>,
      };
      const attempt = span && attemptSpan(span, request);
      const response = await this.http.post(request).catch((err: unknown) => {
        if (attempt) endAttempt(attempt, undefined, err);
        throw err;
      });
      if (attempt) endAttempt(attempt, response);
      responseBody = response.body;
      if (response.status < 200 || response.status > 299) {
        const { 'retry-after': retryAfter, date } = response.headers;
        throw new WebhookRejectedError(response.status, typeof retryAfter === 'string' ? retryAfter : undefined, typeof date === 'string' ? date : undefined);
      }
      slot.release('succeeded');
      this.observer.attempt(true, (performance.now() - started) / 1000, intake.event);
      const trace = { startedAt: now, durationMs: performance.now() - started, responseBody };
      return { kind: 'sent', status: response.status, trace, ...(slot.closedCircuit ? { breakerClosed: webhook.id } : {}) };
    } catch (err) {
      const result = breakerResult(err);
      const circuitMs = slot.release(result, (err as Error)?.message);
      this.observer.attempt(false, (performance.now() - started) / 1000, intake.event);
      if (!(err instanceof DeliveryFailedError)) throw err;
      const trace = { startedAt: now, durationMs: performance.now() - started, responseBody };
      const answered = result === 'rejected' ? { answered: true, ...(slot.closedCircuit ? { breakerClosed: webhook.id } : {}) } : {};
      return { kind: 'attempt-failed', error: err, trace, circuitMs: circuitMs > 0 ? circuitMs : undefined, ...answered };
    }
  }
}

/** A 4xx other than 408 and 429 is an answer, not an outage: see AttemptResult. */
function breakerResult(err: unknown): AttemptResult {
  if (err instanceof WebhookRejectedError && err.status >= 400 && err.status < 500 && err.status !== 408 && err.status !== 429) return 'rejected';
  return 'failed';
}
