import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { BoundedMap } from '../runtime/bounded-map.js';

const PREFIX = 'whsec_';

/** Standard Webhooks signatures with node:crypto: the standardwebhooks library hashes in JavaScript, several times slower. */
export class WebhookSigner {
  private readonly keys = new BoundedMap<string, KeyObject>(10_000);

  /** During a rotation, one `v1,` signature per secret, space-separated: a receiver verifying with either passes. */
  sign(secrets: string | readonly string[], webhookId: string, body: string, now: Date = new Date()) {
    const timestamp = String(Math.floor(now.getTime() / 1000));
    const all = typeof secrets === 'string' ? [secrets] : secrets;
    const signature = all.length === 1 ? this.signOne(all[0]!, webhookId, timestamp, body) : all.map((secret) => this.signOne(secret, webhookId, timestamp, body)).join(' ');
    return { 'webhook-id': webhookId, 'webhook-timestamp': timestamp, 'webhook-signature': signature };
  }

  private signOne(secret: string, webhookId: string, timestamp: string, body: string): string {
    return `v1,${createHmac('sha256', this.keyOf(secret)).update(`${webhookId}.${timestamp}.${body}`).digest('base64')}`;
  }

  private keyOf(secret: string): KeyObject {
    let key = this.keys.get(secret);
    if (!key) {
      // Refuses what the library refuses (not strict base64, empty).
      new Webhook(secret);
      key = createSecretKey(Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64'));
      this.keys.set(secret, key);
    }
    return key;
  }
}
