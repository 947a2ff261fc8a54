import { Webhook } from 'standardwebhooks';

export interface SignedHeaders {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
}

/**
 * Standard Webhooks signatures (`v1,<base64 HMAC-SHA256 of id.timestamp.body>`) made with the
 * standardwebhooks library. Decoded keys are cached per secret: merchants are few, deliveries many.
 */
export class WebhookSigner {
  private readonly keys = new Map<string, Webhook>();

  sign(secret: string, webhookId: string, body: string, now: Date = new Date()): SignedHeaders {
    let webhook = this.keys.get(secret);
    if (!webhook) {
      webhook = new Webhook(secret);
      if (this.keys.size > 10_000) this.keys.clear();
      this.keys.set(secret, webhook);
    }
    return {
      'webhook-id': webhookId,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': webhook.sign(webhookId, now, body),
    };
  }
}
