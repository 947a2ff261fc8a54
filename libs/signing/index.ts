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

  /**
   * With several secrets (the new and the previous one during a rotation) the signature header
   * holds one `v1,` signature per secret, space-separated, as Standard Webhooks allows: a receiver
   * verifying with either secret passes.
   */
  sign(secrets: string | readonly string[], webhookId: string, body: string, now: Date = new Date()): SignedHeaders {
    const list = typeof secrets === 'string' ? [secrets] : secrets;
    return {
      'webhook-id': webhookId,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': list.map((secret) => this.keyOf(secret).sign(webhookId, now, body)).join(' '),
    };
  }

  private keyOf(secret: string): Webhook {
    let webhook = this.keys.get(secret);
    if (!webhook) {
      webhook = new Webhook(secret);
      if (this.keys.size > 10_000) this.keys.clear();
      this.keys.set(secret, webhook);
    }
    return webhook;
  }
}
