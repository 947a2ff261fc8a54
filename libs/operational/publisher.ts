import { type BrokerConnection, BrokerUnroutableError, sendDeclaring } from '../broker/index.js';
import type { Logger } from '../logger/index.js';
import type { IdentifiedEvent, OperationalEventType } from './events.js';

/** Publishes operational events, confirmed; an unroutable one is no error: the platform has not subscribed yet. */
export class OperationalPublisher {
  private readonly inFlight = new Set<Promise<void>>();
  private stopped = false;

  constructor(
    private readonly broker: BrokerConnection,
    private readonly exchange: string,
    private readonly logger: Logger,
    private readonly options: {
      /** Waits between tries of a publish the broker did not confirm; after the last it is logged and dropped. */
      backoffMs?: readonly number[];
      /** Called once per event the broker confirmed (routed or not). */
      onPublished?: (type: OperationalEventType) => void;
      /** The longest publish() takes, tries and waits together, for a program that answers after it. */
      deadlineMs?: number;
      /** A dispatcher with OPERATIONAL_WEBHOOK_URL: an event routed nowhere lost its binding, declared and sent again. */
      boundToDispatch?: boolean;
    } = {},
  ) {}

  /** Publishes in the background. */
  emit(event: IdentifiedEvent): void {
    const work = this.publish(event).catch(() => {});
    this.inFlight.add(work);
    void work.then(() => this.inFlight.delete(work));
  }

  /** Publishes and resolves once confirmed; rejects after the last try. */
  async publish({ id, event }: IdentifiedEvent): Promise<void> {
    const body = Buffer.from(JSON.stringify(event));
    const backoff = this.options.backoffMs ?? [500, 1_000, 2_000, 4_000, 8_000];
    const started = Date.now();
    const deadline = this.options.deadlineMs ?? Infinity;
    for (let attempt = 0; ; attempt++) {
      const send = () =>
        this.broker.publish(this.exchange, event.type, body, {
          persistent: true,
          contentType: 'application/json',
          messageId: id,
          timestamp: Math.floor(Date.parse(event.timestamp) / 1000),
          type: event.type,
        }, Math.min(10_000, deadline - (Date.now() - started)));
      try {
        await (this.options.boundToDispatch ? sendDeclaring(this.broker, send) : send());
        break;
      } catch (err) {
        if (err instanceof BrokerUnroutableError) break;
        if (attempt >= backoff.length || this.stopped || Date.now() - started + backoff[attempt]! >= deadline) {
          this.logger.error('operational event not published', { type: event.type, id, merchantId: event.data.merchantId, error: (err as Error).message });
          throw err;
        }
        await new Promise((resolve) => setTimeout(resolve, backoff[attempt]));
      }
    }
    this.options.onPublished?.(event.type);
    this.logger.info('operational event published', { type: event.type, id, merchantId: event.data.merchantId });
  }

  /** Waits for the events being published (their retries cut short). */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.allSettled([...this.inFlight]);
  }
}
