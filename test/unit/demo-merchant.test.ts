import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { createDemoReceiver } from '../../apps/demo-receiver/server.js';
import { DEV_MERCHANTS_FILE } from '../../libs/config/index.js';
import { readMerchantsFile, receivesEvent } from '../../libs/merchants/index.js';
import { silentLogger } from '../../libs/logger/index.js';

/**
 * Development mode's demo merchant (`npm start`): two endpoints on the demo receiver, at different
 * paths, with different event filters, each verified there with its own secret, so that a fresh
 * clone shows an event fanned out to the endpoints whose filter takes it.
 */
describe("development mode's demo merchant", () => {
  const demo = readMerchantsFile(DEV_MERCHANTS_FILE).find((merchant) => merchant.id === 'm_demo')!;

  it('has two endpoints on the demo receiver, at different paths, each with its own filter and secret', () => {
    expect(demo.endpoints).toHaveLength(2);
    const [all, payouts] = demo.endpoints;
    expect(new URL(all!.url).origin).toBe('http://127.0.0.1:4400');
    expect(new URL(payouts!.url).origin).toBe('http://127.0.0.1:4400');
    expect(new URL(all!.url).pathname).not.toBe(new URL(payouts!.url).pathname);
    expect(all!.secret).not.toBe(payouts!.secret);
    // A payout goes to both, a charge only to the first.
    expect(demo.endpoints.map((e) => receivesEvent(e, 'payout'))).toEqual([true, true]);
    expect(demo.endpoints.map((e) => receivesEvent(e, 'charge.completed'))).toEqual([true, false]);
  });

  it('verifies what comes to each path with that endpoint\'s secret, and refuses it signed with the other', async () => {
    const secretsByPath = Object.fromEntries(demo.endpoints.map((e) => [new URL(e.url).pathname, e.secret]));
    const receiver = createDemoReceiver({ secret: demo.endpoints[0]!.secret, secretsByPath, logger: silentLogger() });
    receiver.listen(0, '127.0.0.1');
    await once(receiver, 'listening');
    const { port } = receiver.address() as AddressInfo;
    const post = async (path: string, secret: string) => {
      const body = JSON.stringify({ event: 'payout', data: { reference: 'PO-1' } });
      const id = `evt_${path.length}`;
      const at = new Date();
      const signature = new Webhook(secret).sign(id, at, body);
      const res = await fetch(`http://127.0.0.1:${port}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': signature },
        body,
      });
      return res.status;
    };
    try {
      const [all, payouts] = demo.endpoints.map((e) => ({ path: new URL(e.url).pathname, secret: e.secret }));
      expect(await post(all!.path, all!.secret)).toBe(204);
      expect(await post(payouts!.path, payouts!.secret)).toBe(204);
      expect(await post(payouts!.path, all!.secret)).toBe(400);
      expect(await post(all!.path, payouts!.secret)).toBe(400);
    } finally {
      receiver.closeAllConnections();
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });
});
