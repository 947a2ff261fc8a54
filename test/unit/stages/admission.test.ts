import { AdmissionStage } from '../../../apps/dispatcher/stages/admission.js';
import { EndpointGuards } from '../../../apps/dispatcher/stages/endpoint-guards.js';
import { endpointOf } from '../../../apps/dispatcher/stages/endpoint-key.js';
import type { IntakeEvent } from '../../../apps/dispatcher/stages/intake.js';
import type { Merchant, MerchantDirectory } from '../../../libs/merchants/index.js';
import { RetryPolicy } from '../../../libs/retry-policy/index.js';
import type { Throttle } from '../../../apps/dispatcher/stages/throttle.js';
import { merchant } from './fakes.js';

const now = new Date('2026-01-01T12:00:00Z');
const intake: IntakeEvent = {
  merchantId: 'm_1', event: 'charge.completed', references: ['r'], body: '{}', webhookId: 'evt_1',
  attempts: 0, deferrals: 0, postponements: 0, firstSeenAt: now.toISOString(), accepted: false,
};

function stage(found: Merchant | undefined, clock = { t: 0 }) {
  const directory: MerchantDirectory = { byId: () => found, byPublicKey: () => undefined, list: () => [], close: async () => {} };
  const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 1, cooldownMs: 10_000, maxCooldownMs: 60_000, now: () => clock.t });
  return { admission: new AdmissionStage(directory, guards, new RetryPolicy({ delaysMs: [1_000, 60_000] })), guards };
}

describe('admission', () => {
  it('finds a merchant missing from the directory unavailable', async () => {
    expect(await stage(undefined).admission.admit(intake, now, () => false)).toEqual({ kind: 'unavailable', why: 'merchant-removed' });
  });

  it('finds a disabled webhook unavailable', async () => {
    expect(await stage(merchant({ enabled: false })).admission.admit(intake, now, () => false)).toEqual({ kind: 'unavailable', why: 'webhook-disabled' });
  });

  it('finds a webhook disabled automatically for failing unavailable as endpoint-disabled, one an operator disabled as webhook-disabled', async () => {
    const auto = merchant({ enabled: false, disabledReason: 'failing', disabledAt: now.toISOString() } as never);
    expect(await stage(auto).admission.admit(intake, now, () => false)).toEqual({ kind: 'unavailable', why: 'endpoint-disabled' });
    const manual = merchant({ enabled: false, disabledReason: 'manual', disabledAt: now.toISOString() } as never);
    expect(await stage(manual).admission.admit(intake, now, () => false)).toEqual({ kind: 'unavailable', why: 'webhook-disabled' });
  });

  it("never postpones a merchant's webhook for another merchant's failures at the same URL", async () => {
    // Another merchant points its endpoint at this one's URL; the server answers its unverifiable webhooks 500.
    const hostile: Merchant = { ...merchant(), id: 'm_hostile', publicKey: 'pk_hostile_12345678' };
    const victim = merchant();
    const directory: MerchantDirectory = { byId: (id) => (id === hostile.id ? hostile : victim), byPublicKey: () => undefined, list: () => [], close: async () => {} };
    const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 1, cooldownMs: 10_000, maxCooldownMs: 60_000, now: () => 0 });
    const admission = new AdmissionStage(directory, guards, new RetryPolicy({ delaysMs: [1_000, 60_000] }));
    const failing = await admission.admit({ ...intake, merchantId: hostile.id }, now, () => false);
    if (failing.kind !== 'admitted') throw new Error(`expected admitted, got ${failing.kind}`);
    // Its failure opens the hostile merchant's row, which opens its breaker (CircuitRows): its own, at that URL.
    guards.openCircuit(admission.keyOfCircuit(hostile.id, hostile.endpoints[0]!.id)!, failing.slot.release('failed', 'HTTP 500'), 10_000);
    expect((await admission.admit({ ...intake, merchantId: hostile.id }, now, () => false)).kind).toBe('circuit-open');
    const mine = await admission.admit(intake, now, () => false);
    expect(mine.kind).toBe('admitted');
  });

  it("finds an event outside the webhook's events unavailable", async () => {
    const found = await stage(merchant({ events: ['refund.completed'] } as never)).admission.admit(intake, now, () => false);
    expect(found).toEqual({ kind: 'unavailable', why: 'event-not-subscribed' });
  });

  it('admits with a slot, and finds the circuit open after the endpoint failed (its row opened)', async () => {
    const { admission } = stage(merchant());
    const first = await admission.admit(intake, now, () => false);
    if (first.kind !== 'admitted') throw new Error(first.kind);
    admission.guards.openCircuit(admission.keyOfCircuit('m_1', merchant().endpoints[0]!.id)!, first.slot.release('failed', 'HTTP 500'), 30_000);
    expect(await admission.admit(intake, now, () => false)).toMatchObject({ kind: 'circuit-open', failures: 1, lastError: 'HTTP 500' });
  });

  it('lets a resend through an open circuit', async () => {
    const { admission } = stage(merchant());
    const first = await admission.admit(intake, now, () => false);
    if (first.kind !== 'admitted') throw new Error(first.kind);
    admission.guards.openCircuit(admission.keyOfCircuit('m_1', merchant().endpoints[0]!.id)!, first.slot.release('failed', 'HTTP 500'), 30_000);
    expect(await admission.admit({ ...intake, resentAt: now.toISOString(), accepted: true }, now, () => false)).toMatchObject({ kind: 'admitted' });
  });

  it('finds a busy slow endpoint busy, and a stopped wait stopping', async () => {
    const clock = { t: 0 };
    const { admission } = stage(merchant(), clock);
    const held = await admission.admit(intake, now, () => false);
    expect(held.kind).toBe('admitted');
    clock.t = 1_000; // the request in flight has run past the threshold: suspected, not yet slow
    let found: unknown = 'waiting';
    const next = admission.admit(intake, now, () => false).then((f) => (found = f));
    // The event loop turns (it could have read the answer): still waiting, not set aside yet.
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(found).toBe('waiting');
    clock.t = 1_200; // still unanswered a threshold after that: slow
    expect(await next).toEqual({ kind: 'busy' });
    expect(await admission.admit({ ...intake, deferrals: 99 }, now, () => true)).toEqual({ kind: 'stopping' });
  });
});

describe('a never-attempted webhook whose span ran out while its circuit was open', () => {
  it('is failed as the circuit would only if it is still open once the throttle answered: one that closed meanwhile waits its turn', async () => {
    const clock = { t: 0 };
    const directory: MerchantDirectory = { byId: () => merchant(), byPublicKey: () => undefined, list: () => [], close: async () => {} };
    const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 1, cooldownMs: 10_000, maxCooldownMs: 60_000, now: () => clock.t });
    // The throttle's answer can take up to a second (a held slot): meanwhile the circuit may close.
    let meanwhile: (() => void) | undefined;
    const throttle = {
      admit: async () => {
        meanwhile?.();
        meanwhile = undefined;
        await new Promise((resolve) => setImmediate(resolve));
        return { kind: 'go' };
      },
    } as unknown as Throttle;
    const admission = new AdmissionStage(directory, guards, new RetryPolicy({ delaysMs: [1_000, 60_000] }), undefined, throttle);
    const sent = async (over: Partial<IntakeEvent> = {}) => {
      const found = await admission.admit({ ...intake, ...over }, now, () => false);
      if (found.kind !== 'admitted') throw new Error(found.kind);
      return found.slot;
    };
    // Its usual latency two seconds: a line of one behind its one request takes longer than a second to clear.
    const first = await sent();
    clock.t = 2_000;
    first.release('succeeded');
    const key = endpointOf('m_1', merchant().endpoints[0]!.id, merchant().endpoints[0]!.url);
    guards.openCircuit(key, (await sent()).release('failed', 'HTTP 500'), 10_000);
    expect(guards.openUntil(key)).toBeGreaterThan(0);
    // Two resends go through the open circuit: one in flight, one waiting for its slot (no deferral left).
    const resend = { resentAt: now.toISOString(), accepted: true, deferrals: 99 };
    const inFlight = await sent(resend);
    const next = sent(resend);
    const after = sent(resend);
    await new Promise((resolve) => setImmediate(resolve));
    // The first resend is delivered while the span-over webhook's throttle answers: the circuit (its row) closes.
    meanwhile = () => {
      inFlight.release('succeeded');
      guards.closeCircuit(key, true);
    };
    const spanOver = await admission.admit({ ...intake, firstSeenAt: new Date(now.getTime() - 120_000).toISOString() }, now, () => false);
    expect(guards.openUntil(endpointOf('m_1', merchant().endpoints[0]!.id, merchant().endpoints[0]!.url))).toBe(0);
    // Closed, the circuit fails nothing: the line is full, so it is set aside like any delivery (no attempt spent).
    expect(spanOver).toEqual({ kind: 'busy' });
    (await next).release('succeeded');
    (await after).release('succeeded');
  });
});

describe('a throttled hand-back taken again before its attempt (its lease renewed)', () => {
  it('asks for a throttle slot again when the take made its slot late: a slow take does not bunch slots', async () => {
    const directory: MerchantDirectory = { byId: () => merchant(), byPublicKey: () => undefined, list: () => [], close: async () => {} };
    const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 1, cooldownMs: 10_000, maxCooldownMs: 60_000, now: () => 0 });
    const steps: string[] = [];
    let retaken = false;
    // Its slot is late once the take is done (PostgreSQL answered it slowly), on time before.
    const throttle = {
      admit: async () => (steps.push('slot'), { kind: 'go', late: () => retaken }),
    } as unknown as Throttle;
    const admission = new AdmissionStage(directory, guards, new RetryPolicy({ delaysMs: [1_000, 60_000] }), undefined, throttle);
    const retake = async () => {
      steps.push('retake');
      retaken = true;
      return undefined;
    };
    const found = await admission.admit({ ...intake, hand: 2, accepted: true }, now, () => false, retake);
    if (found.kind !== 'admitted') throw new Error(found.kind);
    expect(steps).toEqual(['slot', 'retake', 'slot']);
    found.slot.release('succeeded');
  });

  it('ends the walk with what the take found, its request slot given back', async () => {
    const { admission, guards } = stage(merchant());
    const found = await admission.admit({ ...intake, hand: 2, accepted: true }, now, () => false, async () => ({ kind: 'superseded', key: 'evt_1#2' }));
    expect([found, guards.inFlight]).toEqual([{ kind: 'superseded', key: 'evt_1#2' }, 0]);
  });
});

describe("its circuit's probe (a hand-back the row's scheduler marked x-circuit-probe)", () => {
  it('goes through the open breaker without asking the throttle: throttled, it was parked again behind its row every lease', async () => {
    const directory: MerchantDirectory = { byId: () => merchant(), byPublicKey: () => undefined, list: () => [], close: async () => {} };
    const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 1, cooldownMs: 10_000, maxCooldownMs: 60_000, now: () => 0 });
    // The endpoint's throttle is saturated: every delivery would wait its place, far ahead.
    const asked: string[] = [];
    const throttle = { admit: async () => (asked.push('asked'), { kind: 'wait', delayMs: 3_600_000 }) } as unknown as Throttle;
    const admission = new AdmissionStage(directory, guards, new RetryPolicy({ delaysMs: [1_000, 60_000] }), undefined, throttle);
    guards.openCircuit(endpointOf('m_1', merchant().endpoints[0]!.id, merchant().endpoints[0]!.url), 10_000, 0);
    const probe = { ...intake, hand: 3, accepted: true, attempts: 1, probe: true } as IntakeEvent;
    const found = await admission.admit(probe, now, () => false);
    expect({ kind: found.kind, asked }).toEqual({ kind: 'admitted', asked: [] });
    // Any other hand-back is postponed by the open circuit, as before.
    expect((await admission.admit({ ...probe, probe: undefined }, now, () => false)).kind).toBe('circuit-open');
  });
});
