import { randomBytes } from 'node:crypto';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { Webhook as SvixWebhook } from 'svix';
import { WebhookSigner } from '../../libs/signing/index.js';

const bodies = [
  '{"event":"payment.succeeded","data":{"reference":"ref_1","amount":1000}}',
  '{"event":"refund.processed","data":{"note":"café ☕ 𝄞 \\u0000 \\"quoted\\"","nested":{"a":[1,2,3]}}}',
  '',
  `{"event":"payment.succeeded","data":{"blob":"${'x'.repeat(64 * 1024)}"}}`,
];

describe('signing with node:crypto', () => {
  it('makes byte-identical signatures to the standardwebhooks and svix libraries, for 200 random secrets, ids, times and bodies', () => {
    const signer = new WebhookSigner();
    for (let i = 0; i < 200; i++) {
      const secret = `whsec_${randomBytes(8 + (i % 40)).toString('base64')}`;
      const id = `msg_${randomBytes(12).toString('hex')}`;
      const at = new Date(1_700_000_000_000 + i * 987_654);
      const body = i < bodies.length ? bodies[i]! : JSON.stringify({ event: 'payment.succeeded', data: { i, text: randomBytes(i).toString('base64') } });
      const ours = signer.sign(secret, id, body, at);
      expect(ours['webhook-signature']).toBe(new StandardWebhook(secret).sign(id, at, body));
      expect(ours['webhook-signature']).toBe(new SvixWebhook(secret).sign(id, at, body));
      expect(ours['webhook-timestamp']).toBe(String(Math.floor(at.getTime() / 1000)));
    }
  });

  it('signs with every secret of a rotation, one v1 signature each, in order', () => {
    const secrets = [`whsec_${randomBytes(24).toString('base64')}`, `whsec_${randomBytes(32).toString('base64')}`];
    const at = new Date();
    const signed = new WebhookSigner().sign(secrets, 'msg_1', '{"a":1}', at);
    expect(signed['webhook-signature']).toBe(secrets.map((s) => new StandardWebhook(s).sign('msg_1', at, '{"a":1}')).join(' '));
  });

  it('accepts a secret without the whsec_ prefix as the libraries do, and refuses one they refuse', () => {
    const raw = randomBytes(24).toString('base64');
    const at = new Date();
    expect(new WebhookSigner().sign(raw, 'msg_1', 'x', at)['webhook-signature']).toBe(new StandardWebhook(raw).sign('msg_1', at, 'x'));
    expect(() => new WebhookSigner().sign('whsec_', 'msg_1', 'x', at)).toThrow();
    expect(() => new WebhookSigner().sign('whsec_not*base64', 'msg_1', 'x', at)).toThrow();
  });
});
