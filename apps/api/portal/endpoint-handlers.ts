import { randomUUID } from 'node:crypto';
import type { Request, Router } from 'express';
import { PublishUnconfirmedError } from '../../../libs/broker/index.js';
import { type EventName, REFERENCE_FIELDS, sampleEvent } from '../../../libs/contracts/index.js';
import {
  type Actor,
  directoryNow,
  disabledByOf,
  type Endpoint,
  EndpointNotFoundError,
  EndpointSettings,
  type EndpointStatus,
  type EndpointView,
  endpointInputSchema,
  endpointPatchSchema,
  endpointViewOf,
  receivesEvent,
  rotateInputSchema,
  withEndpointRates,
} from '../../../libs/merchants/index.js';
import type { PortalPermission, PortalSession } from '../../../libs/portal/index.js';
import type { ApiDeps } from '../deps.js';
import { ApiError, badRequest, unavailable } from '../errors.js';
import { bodyOf, mount } from '../mount.js';
import { toApiError } from '../translate.js';
import { testEventBody } from './routes.js';

/** What the portal's handlers share (handlers.ts makes it). */
export interface PortalHelpers {
  session(req: Request): Promise<PortalSession>;
  writer(req: Request, permission: PortalPermission | 'view'): Promise<PortalSession>;
  limited(kind: 'settings' | 'tests', merchantId: string): Promise<void>;
  audit(found: PortalSession, req: Request, action: string, changes: Record<string, unknown>): Promise<void>;
  actor(found: PortalSession, req: Request): Actor;
}

export type PortalEndpoint = ReturnType<typeof portalEndpointOf>;

function portalEndpointOf(endpoint: Endpoint, now: Date) {
  const { previousSecretExpiresAt: _latest, ...view } = endpointViewOf(endpoint, now);
  return {
    ...view,
    disabledReason: endpoint.enabled ? null : (endpoint.disabledReason ?? 'manual'),
    disabledBy: disabledByOf(endpoint),
    events: view.events as EventName[],
    allEvents: endpoint.events === undefined,
    secretCreatedAt: endpoint.secretIssuedAt ?? null,
  };
}

/**
 * How long a test event waits for RabbitMQ's confirm (a resend's copy waits as long): a memory or disk alarm
 * blocks publishers without closing anything, and an unbounded wait held the page's request open for good.
 */
const TEST_EVENT_CONFIRM_DEADLINE_MS = 5_000;

/** The sample events' amount fields: zero in a test, so no test reads as money moved. */
const AMOUNT_FIELDS = ['sourceAmount', 'destinationAmount', 'amount'];

/** A sample of the event marked as a test inside the signed body: `data.test: true`, every amount 0, references TEST-…. */
function testSample(event: EventName, merchantId: string) {
  const message = sampleEvent(event, merchantId);
  const data = message.data as Record<string, unknown>;
  for (const field of REFERENCE_FIELDS[event]) data[field] = `TEST-${randomUUID()}`;
  for (const field of AMOUNT_FIELDS) if (field in data) data[field] = 0;
  data.test = true;
  return { message, reference: data[REFERENCE_FIELDS[event][0]!] as string };
}

/** The merchant's endpoints as the portal shows them (as this replica holds them), each with the rate it is sent at now. */
export async function portalEndpointsOf(deps: ApiDeps, merchantId: string): Promise<PortalEndpoint[]> {
  const merchant = deps.merchants.byId(merchantId);
  if (!merchant || merchant.endpoints.length === 0) return [];
  const now = directoryNow(deps.merchants);
  return withEndpointRates(deps.audit, merchant.id, merchant.endpoints.map((endpoint) => portalEndpointOf(endpoint, now)));
}

/** The portal's endpoint routes: the list and one endpoint's settings, secret, test event and removal. */
export function mountPortalEndpoints(app: Router, deps: ApiDeps, helpers: PortalHelpers): void {
  /**
   * `write` within the merchant's settings budget, which counts changes made: one refused (4xx) gives its cell
   * back, so mistakes never lock the merchant out. Taken before, so that no more than the burst run at once.
   */
  const settingsWrite = async <T>(req: Request, permission: PortalPermission, write: (settings: EndpointSettings, actor: Actor, merchantId: string) => Promise<T>) => {
    const found = await helpers.writer(req, permission);
    await helpers.limited('settings', found.merchantId);
    try {
      return { found, written: await write(new EndpointSettings(deps.settings), helpers.actor(found, req), found.merchantId) };
    } catch (err) {
      const answer = toApiError(err, deps.logger);
      // Left counted when PostgreSQL does not answer: the refusal is answered all the same.
      if (answer.status < 500) await deps.portalLimits.settings.giveBack(found.merchantId).catch(() => {});
      throw answer;
    }
  };
  /** The endpoint as this replica holds it now (after a write: what the write made, NOTIFY or not). */
  const shown = async (merchantId: string, endpointId: string): Promise<PortalEndpoint> => {
    const found = (await portalEndpointsOf(deps, merchantId)).find((e) => e.id === endpointId);
    if (!found) throw new EndpointNotFoundError(merchantId, endpointId);
    return found;
  };

  mount(app, 'portalListEndpoints', async (req, res) => {
    const found = await helpers.session(req);
    const list = await portalEndpointsOf(deps, found.merchantId);
    res.json({ message: `${list.length} endpoint(s)`, error: null, data: { endpoints: list, maxEndpoints: deps.settings.maxEndpoints } });
  });

  mount(app, 'portalGetEndpoint', async (req, res, { params }) => {
    const found = await helpers.session(req);
    res.json({ message: `endpoint ${params.endpointId as string}`, error: null, data: await shown(found.merchantId, params.endpointId as string) });
  });

  mount(app, 'portalCreateEndpoint', async (req, res) => {
    const { found, written } = await settingsWrite(req, 'manage-endpoint', (settings, actor, merchantId) => settings.create(merchantId, bodyOf(endpointInputSchema, req), { by: 'merchant', actor }));
    deps.logger.info('endpoint added from the portal', { merchantId: found.merchantId, endpointId: written.view.id });
    // This replica may not hold the write yet (NOTIFY): the write's own view then.
    const view = await shown(found.merchantId, written.view.id).catch(() => fromWritten(written, undefined));
    // The new secret is in this answer only: never stored by the page, never cached.
    res.status(201).json({ message: `endpoint ${written.view.id} added`, error: null, data: { ...view, secret: written.secret } });
  });

  mount(app, 'portalUpdateEndpoint', async (req, res, { params }) => {
    const endpointId = params.endpointId as string;
    const { found, written: { patch, written } } = await settingsWrite(req, 'manage-endpoint', async (settings, actor, merchantId) => {
      const patch = bodyOf(endpointPatchSchema, req);
      return { patch, written: await settings.patch(merchantId, endpointId, patch, { by: 'merchant', actor }) };
    });
    deps.logger.info('endpoint changed from the portal', { merchantId: found.merchantId, endpointId, fields: Object.keys(patch) });
    const view = await shown(found.merchantId, endpointId).catch(() => undefined);
    // This replica may not hold the write yet (NOTIFY): the write's own view then.
    res.json({ message: 'endpoint updated', error: null, data: view && sameAs(view, written.view) ? view : fromWritten(written, view) });
  });

  mount(app, 'portalDeleteEndpoint', async (req, res, { params }) => {
    const endpointId = params.endpointId as string;
    const { found, written } = await settingsWrite(req, 'manage-endpoint', (settings, actor, merchantId) => settings.delete(merchantId, endpointId, { by: 'merchant', actor }));
    deps.logger.info('endpoint deleted from the portal', { merchantId: found.merchantId, endpointId });
    res.json({ message: `endpoint ${endpointId} deleted`, error: null, data: { deleted: written.deleted } });
  });

  mount(app, 'portalRotateSecret', async (req, res, { params }) => {
    const endpointId = params.endpointId as string;
    const { found, written } = await settingsWrite(req, 'manage-secret', (settings, actor, merchantId) => settings.rotate(merchantId, endpointId, bodyOf(rotateInputSchema, req).graceSeconds, { actor }));
    const { replayed: _replayed, version: _version, ...rotated } = written;
    deps.logger.info('endpoint secret rotated from the portal', { merchantId: found.merchantId, endpointId, previousSecretExpiresAt: rotated.previousSecretExpiresAt });
    res.json({ message: 'endpoint secret rotated', error: null, data: rotated });
  });

  mount(app, 'portalSendTestEvent', async (req, res, { params }) => {
    const found = await helpers.writer(req, 'manage-endpoint');
    const endpointId = params.endpointId as string;
    const input = testEventBody.safeParse(req.body ?? {});
    if (!input.success) throw badRequest('invalid_body', 'Give the event to send: {"event": "charge.completed" | "payout" | "refund.completed"}');
    const target = deps.merchants.byId(found.merchantId)?.endpoints.find((e) => e.id === endpointId);
    if (!target) throw new EndpointNotFoundError(found.merchantId, endpointId);
    // The dispatcher skips a new event for an endpoint that is off or does not take it: refused here, not answered "sent".
    if (!target.enabled) throw new ApiError(409, 'webhook_disabled', `The endpoint ${endpointId} is disabled; enable it, then send it a test event`);
    if (!receivesEvent(target, input.data.event)) throw new ApiError(409, 'event_not_subscribed', `The endpoint ${endpointId} does not receive ${input.data.event} events; add the event to it, or test one it receives`);
    if (!deps.brokerConnected()) throw unavailable('The message broker is unavailable; try again shortly');
    await helpers.limited('tests', found.merchantId);
    const { message, reference } = testSample(input.data.event, found.merchantId);
    const { messageId } = await deps.portal.publish(message, { test: true, endpointId, deadlineMs: TEST_EVENT_CONFIRM_DEADLINE_MS }).catch((err: unknown) => {
      // Published, but not confirmed: it may still be stored and sent, so the answer says so.
      if (err instanceof PublishUnconfirmedError) throw unavailable('RabbitMQ did not confirm the test event in time; it may still be sent: look for it in the webhooks list before sending another');
      throw err;
    });
    await helpers.audit(found, req, 'portal.test_event', { event: input.data.event, endpointId, webhookId: messageId, reference });
    deps.logger.info('test event sent from the portal', { merchantId: found.merchantId, endpointId, event: input.data.event, reference });
    res.status(202).json({ message: `test ${input.data.event} sent`, error: null, data: { webhookId: messageId, reference } });
  });
}

/** Whether the replica's copy already shows what the write made. */
function sameAs(view: PortalEndpoint, written: EndpointView): boolean {
  return view.url === written.url && view.enabled === written.enabled && JSON.stringify(view.events) === JSON.stringify(written.events) && view.maxPerSecond === written.maxPerSecond && view.orderByReference === written.orderByReference && view.description === written.description;
}

/**
 * The write's own answer in the portal's shape: who disabled it and whether it takes every event from the
 * written endpoint (never guessed from the view: an operator's disable is `manual` too); only the secret's
 * age, which no endpoint write changes, from the replica's copy.
 */
export function fromWritten({ view, disabledBy, allEvents }: { view: EndpointView } & EndpointStatus, held: PortalEndpoint | undefined): PortalEndpoint {
  return { ...view, disabledBy, events: view.events as EventName[], allEvents, secretCreatedAt: held?.secretCreatedAt ?? null };
}
