import type { ApiProgram } from '../../apps/api/program.js';
import { EndpointSettings, type EndpointInput, type EndpointPatch, type MerchantSettings, type WriteGuards } from '../../libs/merchants/index.js';
import { type Answer, call } from './api.js';
import { waitFor } from './wait.js';

/**
 * A merchant with one endpoint, the way most tests want it: the merchant's PUT, then its endpoint's
 * POST (a merchant's endpoints are written through their own routes alone). One line at each call site.
 */
export interface MerchantWithEndpoint {
  publicKey: string;
  url: string;
  enabled?: boolean;
  events?: string[];
  maxPerSecond?: number;
  orderByReference?: boolean;
  description?: string;
}

type Headers = Record<string, string>;

const json = (api: ApiProgram, method: string, path: string, headers: Headers, body?: unknown) =>
  call(api, path, { method, headers: { 'content-type': 'application/json', ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });

/**
 * PUT /admin/merchants/{id} with its public key, then POST one endpoint: answers the endpoint's
 * creation (201; data: the endpoint with its secret), or the PUT's answer when that failed.
 */
export async function putMerchantWithEndpoint(api: ApiProgram, id: string, { publicKey, ...endpoint }: MerchantWithEndpoint, headers: Headers): Promise<Answer> {
  const merchant = await json(api, 'PUT', `/admin/merchants/${id}`, headers, { publicKey });
  if (merchant.status >= 300) return merchant;
  return json(api, 'POST', `/admin/merchants/${id}/endpoints`, headers, endpoint);
}

/**
 * The path of the merchant's first endpoint, as this replica lists them: a replica answers GET
 * from memory, a notification behind the one that wrote, so an endpoint just made elsewhere is
 * waited for (5 s).
 */
export async function firstEndpointPath(api: ApiProgram, id: string, headers: Headers): Promise<string> {
  let status = 0;
  const first = await waitFor(`${id}'s endpoint listed by this replica`, async () => {
    const listed = await json(api, 'GET', `/admin/merchants/${id}/endpoints`, headers);
    status = listed.status;
    return (listed.body as { data?: { endpoints?: Array<{ id: string }> } }).data?.endpoints?.[0];
  }, 5_000, 20).catch((err: Error) => {
    throw new Error(`${err.message} (its last GET answered ${status})`);
  });
  return `/admin/merchants/${id}/endpoints/${first.id}`;
}

/** PATCH the merchant's first endpoint (what `PATCH /admin/merchants/{id}` with `webhook` did). */
export async function patchFirstEndpoint(api: ApiProgram, id: string, patch: unknown, headers: Headers): Promise<Answer> {
  return json(api, 'PATCH', await firstEndpointPath(api, id, headers), headers, patch);
}

/** Rotates the secret of the merchant's first endpoint. */
export async function rotateFirstEndpoint(api: ApiProgram, id: string, body: unknown, headers: Headers): Promise<Answer> {
  return json(api, 'POST', `${await firstEndpointPath(api, id, headers)}/secret/rotate`, headers, body);
}

/** The same through MerchantSettings (the CLI's and the programs' library): the merchant, then its one endpoint (under `<key>-endpoint` when an Idempotency-Key is given). */
export async function putWithEndpoint(settings: MerchantSettings, id: string, { publicKey, ...endpoint }: MerchantWithEndpoint, guards: WriteGuards = {}) {
  await settings.put(id, { publicKey }, guards);
  // Its own Idempotency-Key: a key names one request.
  const endpointGuards = guards.idempotencyKey === undefined ? guards : { ...guards, idempotencyKey: `${guards.idempotencyKey}-endpoint` };
  return new EndpointSettings(settings).create(id, { enabled: true, ...endpoint } as EndpointInput, endpointGuards);
}

/** The id of the merchant's first endpoint as `settings` holds it. */
export function firstEndpointId(settings: MerchantSettings, id: string): string {
  const first = settings.merchant(id)?.endpoints[0];
  if (!first) throw new Error(`merchant ${id} has no endpoint`);
  return first.id;
}

export function patchFirst(settings: MerchantSettings, id: string, patch: EndpointPatch, guards: WriteGuards = {}) {
  return new EndpointSettings(settings).patch(id, firstEndpointId(settings, id), patch, guards);
}

export function rotateFirst(settings: MerchantSettings, id: string, graceSeconds: number, guards: WriteGuards = {}) {
  return new EndpointSettings(settings).rotate(id, firstEndpointId(settings, id), graceSeconds, guards);
}
