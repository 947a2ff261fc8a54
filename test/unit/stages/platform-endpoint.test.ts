import type { ConsumeMessage } from 'amqplib';
import { platformEndpoint } from '../../../apps/dispatcher/platform.js';
import { AdmissionStage } from '../../../apps/dispatcher/stages/admission.js';
import { EndpointGuards } from '../../../apps/dispatcher/stages/endpoint-guards.js';
import { parseIntake } from '../../../apps/dispatcher/stages/intake.js';
import { InvalidMessageError } from '../../../apps/dispatcher/errors.js';
import { HEADERS, PLATFORM_MERCHANT_ID } from '../../../libs/contracts/index.js';
import type { MerchantDirectory } from '../../../libs/merchants/index.js';
import { enabledEvent } from '../../../libs/operational/index.js';
import { RetryPolicy } from '../../../libs/retry-policy/index.js';
import { SECRET, merchant } from './fakes.js';

const EVENTS = 'p.events';
const DISPATCH = 'p.dispatch';
const now = new Date('2026-11-25T10:00:00.000Z');
const { id, event } = enabledEvent({ merchantId: 'm_1', endpointId: 'ep_platform_test', url: 'https://shop.example/hooks', enabledAt: now.toISOString() }, now);
// Published as OperationalPublisher does: the body is the event, the messageId its id.
const published = JSON.stringify(event);

function message(body: string, exchange: string, headers: Record<string, unknown> = {}, messageId: string | undefined = id): ConsumeMessage {
  return { content: Buffer.from(body), fields: { exchange, routingKey: 'endpoint.enabled' }, properties: { messageId, headers } } as unknown as ConsumeMessage;
}

const invalid = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return err instanceof InvalidMessageError ? err.code : err;
  }
  return 'accepted';
};

describe("an operational event on dispatch (the platform's endpoint)", () => {
  it('is taken from the operational exchange for the platform, its body exactly as published and its webhook-id the event id', () => {
    const intake = parseIntake(message(published, 'p.operational'), 1_000_000, now, EVENTS, DISPATCH);
    expect(intake).toMatchObject({ merchantId: PLATFORM_MERCHANT_ID, event: 'endpoint.enabled', references: [], body: published, webhookId: id, attempts: 0, accepted: false });
  });

  it('keeps its attempts and first-seen time when its wait is handed back', () => {
    const back = message(published, '', { [HEADERS.waitHand]: 1, [HEADERS.attempts]: 2, [HEADERS.firstSeenAt]: '2026-11-25T09:59:00.000Z', [HEADERS.merchantId]: PLATFORM_MERCHANT_ID });
    expect(parseIntake(back, 1_000_000, now, EVENTS, DISPATCH)).toMatchObject({ merchantId: PLATFORM_MERCHANT_ID, attempts: 2, firstSeenAt: '2026-11-25T09:59:00.000Z', accepted: true, body: published });
  });

  it("is never taken from upstream's exchange: upstream cannot have the service sign a body for the platform", () => {
    expect(invalid(() => parseIntake(message(published, EVENTS), 1_000_000, now, EVENTS, DISPATCH))).toBe('invalid-envelope');
  });

  it('is never taken when moved back by hand from invalid (the default exchange, no wait hand): upstream may have published it', () => {
    expect(invalid(() => parseIntake(message(published, '', { 'x-upstream': 'billing' }), 1_000_000, now, EVENTS, DISPATCH))).toBe('invalid-envelope');
  });

  it("is a merchant's event when the body names a merchant, whatever else it holds", () => {
    const body = JSON.stringify({ ...event, merchantId: 'm_1', event: 'payout', data: { reference: 'po_1' } });
    expect(parseIntake(message(body, ''), 1_000_000, now, EVENTS, DISPATCH)).toMatchObject({ merchantId: 'm_1', event: 'payout', references: ['po_1'] });
  });

  it('is parked when its type is no operational event', () => {
    expect(invalid(() => parseIntake(message(JSON.stringify({ ...event, type: 'endpoint.exploded' }), 'p.operational'), 1_000_000, now, EVENTS, DISPATCH))).toBe('invalid-envelope');
  });
});

describe("admission of the platform's endpoint", () => {
  const intake = parseIntake(message(published, 'p.operational'), 1_000_000, now, EVENTS, DISPATCH);
  // A directory that holds a merchant under any id asked: the platform must never be looked up there.
  const directory: MerchantDirectory = { byId: () => merchant({ url: 'https://merchant.example/impostor' }), byPublicKey: () => undefined, list: () => [], close: async () => {} };
  const stage = (platform = platformEndpoint('https://platform.example/ops', SECRET)) =>
    new AdmissionStage(directory, new EndpointGuards({ maxInFlight: 1, failureThreshold: 1, cooldownMs: 10_000, maxCooldownMs: 60_000 }), new RetryPolicy({ delaysMs: [1_000] }), platform);

  it("sends to OPERATIONAL_WEBHOOK_URL with OPERATIONAL_WEBHOOK_SECRET, from the dispatcher's config and not the directory", async () => {
    const found = await stage().admit(intake, now, () => false);
    expect(found).toMatchObject({ kind: 'admitted', webhook: { url: 'https://platform.example/ops', secret: SECRET, enabled: true } });
  });

  it('skips an event still bound to dispatch at a dispatcher without the URL (recorded, not parked)', async () => {
    expect(await stage(platformEndpoint(undefined, undefined)).admit(intake, now, () => false)).toEqual({ kind: 'unavailable', why: 'webhook-disabled' });
  });
});
