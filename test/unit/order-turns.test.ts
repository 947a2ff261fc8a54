import { describe, expect, it } from '@jest/globals';
import { silentLogger } from '../../libs/logger/index.js';
import { type OrderAdmit, OrderGate, type OrderStore } from '../../libs/ordering/index.js';

/**
 * OrderGate asks for places in the order the messages' turns were taken (as the dispatcher consumed
 * them), not in the order their walks came to ask: a walk with one await more on its way (a fan-out's
 * share once) let the refund taken behind its charge take its place first.
 */

/** A gate whose store writes nothing: it notes the webhooks in the order their places were asked, every one a head. */
function gate() {
  const asked: string[] = [];
  const store = {
    step: async (admits: readonly OrderAdmit[]) => {
      asked.push(...admits.map((a) => a.webhookId));
      return new Map();
    },
  };
  return { order: new OrderGate(store as unknown as OrderStore, silentLogger()), asked };
}

const place = (webhookId: string, key = 'TX-1', endpointId = 'ep_a') => ({ merchantId: 'm_1', endpointId, webhookId, key });
const noWait = () => ({ headers: {}, content: Buffer.alloc(0) });
/** Every promise that can settle now has settled. */
const settled = () => new Promise((resolve) => setImmediate(resolve));

describe('OrderGate turns', () => {
  it('a refund taken after its charge asks after it, though its walk came to ask first', async () => {
    const { order, asked } = gate();
    const charge = order.turn('m_1', 'TX-1');
    const refund = order.turn('m_1', 'TX-1');
    const refunded = order.admit(place('evt_refund'), noWait, refund);
    await settled();
    expect(asked).toEqual([]);
    await order.admit(place('evt_charge'), noWait, charge);
    await refunded;
    expect(asked).toEqual(['evt_charge', 'evt_refund']);
  });

  it('a turn passed without asking lets the next ask, and not before the turns taken before it asked', async () => {
    const { order, asked } = gate();
    const [first, unordered, third] = [order.turn('m_1', 'TX-1'), order.turn('m_1', 'TX-1'), order.turn('m_1', 'TX-1')];
    unordered.pass();
    const thirdAsked = order.admit(place('evt_3'), noWait, third);
    await settled();
    expect(asked).toEqual([]);
    await order.admit(place('evt_1'), noWait, first);
    await thirdAsked;
    expect(asked).toEqual(['evt_1', 'evt_3']);
  });

  it("a fan-out's shares each ask before the next of the reference, once the message's own turn passed", async () => {
    const { order, asked } = gate();
    const charge = order.turn('m_1', 'TX-1');
    const refund = order.turn('m_1', 'TX-1');
    const [a, b] = [charge.share(), charge.share()];
    charge.pass();
    const refunded = order.admit(place('evt_refund'), noWait, refund);
    await order.admit(place('evt_charge', 'TX-1', 'ep_b'), noWait, b);
    await settled();
    expect(asked).toEqual(['evt_charge']);
    await order.admit(place('evt_charge', 'TX-1', 'ep_a'), noWait, a);
    await refunded;
    expect(asked).toEqual(['evt_charge', 'evt_charge', 'evt_refund']);
    expect(() => charge.share()).toThrow();
  });

  it('another reference, or another merchant, does not wait for it', async () => {
    const { order, asked } = gate();
    const held = order.turn('m_1', 'TX-1');
    await order.admit(place('evt_other'), noWait, order.turn('m_1', 'TX-2'));
    await order.admit({ ...place('evt_elsewhere'), merchantId: 'm_2' }, noWait, order.turn('m_2', 'TX-1'));
    expect(asked).toEqual(['evt_other', 'evt_elsewhere']);
    held.pass();
    await order.admit(place('evt_after'), noWait, order.turn('m_1', 'TX-1'));
    expect(asked).toEqual(['evt_other', 'evt_elsewhere', 'evt_after']);
  });
});
