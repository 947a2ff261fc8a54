import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

export interface SignedHeaders {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
}

const PREFIX = 'whsec_';

/**
 * Standard Webhooks signatures (`v1,<base64 HMAC-SHA256 of id.timestamp.body>`), computed with
 * node:crypto: the standardwebhooks library hashes in JavaScript, several times slower on every
 * delivery. test/unit/signing.test.ts proves the bytes identical to standardwebhooks' and svix's.
 * Decoded keys are cached per secret: merchants are few, deliveries many.
 */
export class WebhookSigner {
  private readonly keys = new Map<string, KeyObject>();

  /**
   * With several secrets (the new and the previous one during a rotation) the signature header
   * holds one `v1,` signature per secret, space-separated, as Standard Webhooks allows: a receiver
   * verifying with either secret passes.
   */
  sign(secrets: string | readonly string[], webhookId: string, body: string, now: Date = new Date()): SignedHeaders {
    const timestamp = String(Math.floor(now.getTime() / 1000));
    let signature: string;
    if (typeof secrets === 'string') signature = this.signOne(secrets, webhookId, timestamp, body);
    else if (secrets.length === 1) signature = this.signOne(secrets[0]!, webhookId, timestamp, body); // no rotation: nearly every delivery
    else signature = secrets.map((secret) => this.signOne(secret, webhookId, timestamp, body)).join(' ');
    return { 'webhook-id': webhookId, 'webhook-timestamp': timestamp, 'webhook-signature': signature };
  }

  private signOne(secret: string, webhookId: string, timestamp: string, body: string): string {
    return `v1,${createHmac('sha256', this.keyOf(secret)).update(`${webhookId}.${timestamp}.${body}`).digest('base64')}`;
  }

  private keyOf(secret: string): KeyObject {
    let key = this.keys.get(secret);
    if (!key) {
      // The library's constructor decides what a valid secret is (strict base64, not empty): a
      // secret it refuses is refused here the same way.
      new Webhook(secret);
      key = createSecretKey(Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64'));
      if (this.keys.size > 10_000) this.keys.clear();
      this.keys.set(secret, key);
    }
    return key;
  }
}
