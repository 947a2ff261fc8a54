// Verify signatures: snippets for the merchant's server, with the path of its first endpoint.

import { copyButton, endpointList, h, show } from './core.js';

export async function verify(): Promise<void> {
  const first = (await endpointList())[0];
  const url = first ? new URL(first.url) : new URL('https://example.com/webhooks');
  // Each value as a JSON literal (valid JavaScript and Python too): a path such as /'+eval(...)+' would
  // otherwise be code on the machine of whoever copies the snippet.
  const path = JSON.stringify(url.pathname);
  const port = JSON.stringify(Number(url.port) || (url.protocol === 'https:' ? 443 : 80));
  const node = `// npm install standardwebhooks express
import express from 'express';
import { Webhook } from 'standardwebhooks';

const wh = new Webhook(process.env.WEBHOOK_SECRET); // whsec_... from the Endpoints screen
const app = express();

app.post(${path}, express.raw({ type: 'application/json' }), (req, res) => {
  try {
    // Checks webhook-id, webhook-timestamp (5 minutes) and every signature in webhook-signature.
    const { event, data } = wh.verify(req.body, req.headers);
    // Store req.headers['webhook-id'] and skip an id you have seen: a resend keeps it.
    res.sendStatus(204);
  } catch {
    res.sendStatus(400);
  }
});
app.listen(${port});`;
  const python = `# pip install standardwebhooks flask
import os
from flask import Flask, request
from standardwebhooks.webhooks import Webhook

wh = Webhook(os.environ["WEBHOOK_SECRET"])  # whsec_... from the Endpoints screen
app = Flask(__name__)

@app.post(${path})
def webhook():
    try:
        payload = wh.verify(request.get_data(), dict(request.headers))
    except Exception:
        return "", 400
    # payload["event"], payload["data"]; request.headers["webhook-id"] stays the same on a resend
    return "", 204`;
  show('Verify signatures',
    h('p', {}, 'Every webhook is signed the Standard Webhooks way: webhook-signature holds v1,<base64 HMAC-SHA256> of "webhook-id.webhook-timestamp.body", made with your secret (and with the old secret too during a rotation). Verify the raw body, before parsing it.'),
    h('h2', {}, 'Node.js'), h('pre', { tabindex: '0', 'aria-label': 'Node.js example' }, node), h('div', { class: 'row' }, copyButton('Copy Node.js example', () => node)),
    h('h2', {}, 'Python'), h('pre', { tabindex: '0', 'aria-label': 'Python example' }, python), h('div', { class: 'row' }, copyButton('Copy Python example', () => python)));
}
