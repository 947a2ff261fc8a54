import type { ConsumeMessage, Options } from 'amqplib';
import { BrokerUnavailableError, type BrokerConnection, type Delivery } from '../../../libs/broker/index.js';
import type { Endpoint, Merchant } from '../../../libs/merchants/index.js';

export const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

export function merchant(over: Partial<Endpoint> = {}): Merchant {
  return { id: 'm_1', publicKey: 'pk_test_12345678', endpoints: [{ id: 'ep_shop_hooks', url: 'https://shop.example.com/hooks', enabled: true, secret: SECRET, ...over }] };
}

/** A broker that records what is published, and refuses the first `refuse` publishes (to `only`, when named). */
export function fakeBroker(refuse = 0, only?: string) {
  const published: Array<{ queue: string; content: Buffer; options: Options.Publish }> = [];
  let refusals = refuse;
  const broker = {
    isConnected: true,
    async sendToQueue(queue: string, content: Buffer, options: Options.Publish) {
      if (refusals > 0 && (only === undefined || queue === only)) {
        refusals--;
        throw new BrokerUnavailableError('nacked');
      }
      published.push({ queue, content, options });
    },
  } as unknown as BrokerConnection;
  return { broker, published };
}

/** A delivery that records its ack or nack. */
export function fakeDelivery(body: unknown, properties: Partial<ConsumeMessage['properties']> = {}, exchange = 'p.events') {
  const settled: string[] = [];
  const message = {
    content: Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)),
    fields: { exchange, routingKey: 'charge.completed', deliveryTag: 1, redelivered: false, consumerTag: 'c' },
    properties: { headers: {}, ...properties },
  } as unknown as ConsumeMessage;
  const delivery: Delivery & { settled: string[] } = {
    message,
    live: true,
    settled,
    ack: () => settled.push('ack'),
    nack: (requeue: boolean) => settled.push(requeue ? 'requeue' : 'drop'),
  };
  return delivery;
}
