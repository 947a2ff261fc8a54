import type { ConsumeMessage } from 'amqplib';
import { fanOut } from '../../../apps/dispatcher/stages/fan-out.js';
import type { IntakeEvent } from '../../../apps/dispatcher/stages/intake.js';
import type { Delivery } from '../../../libs/broker/index.js';

const intake: IntakeEvent = {
  merchantId: 'm_1', event: 'payout', references: ['r'], body: '{}', webhookId: 'evt_1',
  attempts: 0, deferrals: 0, postponements: 0, firstSeenAt: '2026-01-01T12:00:00.000Z', accepted: false,
};

/** The original message: what was done to it, in order. */
function original() {
  const calls: string[] = [];
  const delivery: Delivery = {
    message: { content: Buffer.from('{}'), fields: {}, properties: { headers: {} } } as unknown as ConsumeMessage,
    live: true,
    ack: () => void calls.push('ack'),
    nack: (requeue) => void calls.push(`nack(${requeue})`),
  };
  return { delivery, calls };
}

const later = () => new Promise((resolve) => setTimeout(resolve, 5));

describe('fan-out: each endpoint walked from the one message', () => {
  it('walks each endpoint on its own intake and acks the original once, after the last endpoint is done', async () => {
    const { delivery, calls } = original();
    const walked: Array<string | undefined> = [];
    await fanOut(delivery, intake, ['ep_a', 'ep_b', 'ep_c'], async (share, own) => {
      own.ordered = true; // a walk's mark stays on its own copy
      walked.push(own.endpointId);
      // The slowest endpoint settles last: nothing is acked before it.
      if (own.endpointId === 'ep_b') await later();
      calls.push(`done ${own.endpointId}`);
      share.ack();
    }, async () => {
      throw new Error('nothing to hand on');
    });
    expect(walked).toEqual(['ep_a', 'ep_b', 'ep_c']);
    expect(calls).toEqual(['done ep_a', 'done ep_c', 'done ep_b', 'ack']);
    expect(intake.endpointId).toBeUndefined();
    expect(intake.ordered).toBeUndefined();
  });

  it("hands on an endpoint whose walk returned its share, so that the others are not delivered again, and acks the original", async () => {
    const { delivery, calls } = original();
    const handed: IntakeEvent[] = [];
    await fanOut(delivery, intake, ['ep_a', 'ep_b'], async (share, own) => {
      own.ordered = true;
      if (own.endpointId === 'ep_b') share.nack(true);
      else share.ack();
    }, async (share, own) => {
      handed.push(own);
      share.ack();
    });
    expect(handed.map((own) => own.endpointId)).toEqual(['ep_b']);
    // A fresh copy: not the walk's marks.
    expect(handed[0]!.ordered).toBeUndefined();
    expect(calls).toEqual(['ack']);
  });

  it('returns the original only when an endpoint could not be handed on either', async () => {
    const { delivery, calls } = original();
    await fanOut(delivery, intake, ['ep_a', 'ep_b'], async (share, own) => {
      if (own.endpointId === 'ep_b') share.nack(true);
      else share.ack();
    }, async (share) => share.nack(true));
    expect(calls).toEqual(['nack(true)']);
  });

  it('leaves the original alone once its channel is gone (the broker has returned it)', async () => {
    const { delivery, calls } = original();
    const gone = { ...delivery, live: false };
    await fanOut(gone, intake, ['ep_a', 'ep_b'], async () => {}, async () => {
      throw new Error('not handed on: the broker redelivers the original');
    });
    expect(calls).toEqual([]);
  });
});
