import type { BrokerConnection, Consumer, Delivery } from '../broker/index.js';
import { HEADERS } from '../contracts/index.js';
import { DeliveryFailedError, type WebhookHttpClient, WebhookRejectedError } from '../http/index.js';
import type { Logger } from '../logger/index.js';
import { WebhookSigner } from '../signing/index.js';
import type { TopologyNames } from '../topology/index.js';

export interface OperationalWebhookOptions {
  url: string;
  secret: string;
  /** RETRY_SCHEDULE: the wait after each failed attempt; one attempt more than delays. */
  retryDelaysMs: readonly number[];
  timeoutMs: number;
  userAgent: string;
  /** For webhooks_operational_webhook_total. */
  onResult?: (result: 'delivered' | 'retried' | 'failed') => void;
}

/**
 * POSTs the operational events to OPERATIONAL_WEBHOOK_URL as Standard Webhooks (webhook-id = the
 * event's messageId), for a platform that does not consume AMQP. It consumes
 * `<prefix>.operational.webhook`, bound to the operational exchange, so with several dispatchers
 * each event is sent by one. A failed POST waits in `<prefix>.operational.retry.<i>` (the retry
 * schedule's delay i) and comes back, as a merchant's webhook does; the same HTTP client carries
 * it, with its timeout and address guard. After the last attempt the event is logged and dropped:
 * the exchange's own subscribers still had it.
 */
export class OperationalWebhookSender {
  private consumer?: Consumer;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly signer = new WebhookSigner();

  constructor(
    private readonly broker: BrokerConnection,
    private readonly names: TopologyNames,
    private readonly http: WebhookHttpClient,
    private readonly logger: Logger,
    private readonly options: OperationalWebhookOptions,
  ) {}

  async start(): Promise<void> {
    this.consumer = await this.broker.consume(this.names.operationalWebhook, {
      prefetch: 8,
      onMessage: (delivery) => {
        const work = this.handle(delivery).catch((err: unknown) => {
          this.logger.error('operational webhook: unexpected error', { error: (err as Error)?.message });
          if (delivery.live) delivery.nack(false);
        });
        this.inFlight.add(work);
        void work.then(() => this.inFlight.delete(work));
      },
    });
  }

  async stop(): Promise<void> {
    await this.consumer?.cancel();
    await Promise.allSettled([...this.inFlight]);
    await this.consumer?.close();
  }

  private async handle(delivery: Delivery): Promise<void> {
    const { message } = delivery;
    const body = message.content.toString('utf8');
    const id = typeof message.properties.messageId === 'string' && message.properties.messageId !== '' ? message.properties.messageId : `op_unknown_${Date.now()}`;
    const previous = Number(message.properties.headers?.[HEADERS.attempts] ?? 0);
    const attempt = (Number.isInteger(previous) && previous >= 0 ? previous : 0) + 1;
    const now = new Date();
    let error: string;
    try {
      const signed = this.signer.sign(this.options.secret, id, body, now);
      const response = await this.http.post({
        url: this.options.url,
        body,
        timeoutMs: this.options.timeoutMs,
        headers: { 'content-type': 'application/json', 'user-agent': this.options.userAgent, ...signed },
      });
      if (response.status >= 200 && response.status <= 299) {
        this.options.onResult?.('delivered');
        return delivery.ack();
      }
      error = new WebhookRejectedError(response.status).message;
    } catch (err) {
      if (!(err instanceof DeliveryFailedError)) throw err;
      error = err.message;
    }
    if (attempt > this.options.retryDelaysMs.length) {
      this.options.onResult?.('failed');
      this.logger.error('operational webhook not delivered after its last attempt', { id, type: message.properties.type, attempts: attempt, error });
      return delivery.ack();
    }
    try {
      await this.broker.sendToQueue(
        this.names.operationalRetry(attempt - 1),
        message.content,
        { persistent: true, contentType: 'application/json', messageId: id, type: message.properties.type, headers: { [HEADERS.attempts]: attempt, [HEADERS.lastError]: error.slice(0, 500) } },
        10_000,
      );
    } catch (err) {
      // Back to the queue once; its delivery limit bounds a broker that keeps refusing.
      this.logger.warn('operational webhook retry not scheduled; returned to its queue', { id, error: (err as Error).message });
      if (delivery.live) delivery.nack(true);
      return;
    }
    this.options.onResult?.('retried');
    this.logger.warn('operational webhook attempt failed, retry scheduled', { id, attempt, error, delayMs: this.options.retryDelaysMs[attempt - 1] });
    delivery.ack();
  }
}
