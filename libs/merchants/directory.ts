import { createHash, randomBytes } from 'node:crypto';
import type { Endpoint, GraceSecret, Merchant } from './schema.js';

/** Where merchants come from: PostgreSQL (PgMerchantDirectory). Reads are answered from memory. */
export interface MerchantDirectory {
  byId(id: string): Merchant | undefined;
  byPublicKey(publicKey: string): Merchant | undefined;
  list(): Merchant[];
  /** Deleted within the day and not made again: not merely unknown, nothing of it is to be sent or written again. */
  deleted?(id: string): boolean;
  close(): Promise<void>;
  /** Reads what changed since the last read (a notification may come late, or never). */
  poll?(): Promise<void>;
  /** PostgreSQL's time now, by which the times it stamped are judged: never this host's wall clock. */
  clock?(): Date;
}

/** PostgreSQL's time (see clock), else this host's. */
export function directoryNow(directory: Pick<MerchantDirectory, 'clock'> | undefined): Date {
  return directory?.clock?.() ?? new Date();
}

/** The endpoints an event goes to (one delivery each), in the merchant's order. */
export function matchingEndpoints(merchant: Merchant, event: string): Endpoint[] {
  return merchant.endpoints.filter((endpoint) => endpoint.enabled && receivesEvent(endpoint, event));
}

/** What a row written before endpoints ('') was for; not "the first endpoint now", which may be newer. */
export function legacyEndpointId(merchantId: string): string {
  return `ep_${createHash('md5').update(merchantId).digest('hex').slice(0, 22)}`;
}

export function newEndpointId(): string {
  return `ep_${randomBytes(16).toString('base64url')}`;
}

/** No filter: every event. */
export function receivesEvent(webhook: Pick<Endpoint, 'events'>, event: string): boolean {
  return webhook.events === undefined || (webhook.events as readonly string[]).includes(event);
}

/** The current secret, and every replaced one still in its grace. */
export function signingSecrets(webhook: Endpoint, now: Date): string[] {
  if (!webhook.previousSecrets?.length) return [webhook.secret];
  return [webhook.secret, ...graceSecrets(webhook, now).map((grace) => grace.secret)];
}

/** Replaced secrets still in their grace at `now`, the latest expiry first. */
export function graceSecrets(webhook: Endpoint, now: Date): GraceSecret[] {
  const seen = new Set([webhook.secret]);
  const kept: GraceSecret[] = [];
  for (const grace of webhook.previousSecrets ?? []) {
    if (seen.has(grace.secret) || !(Date.parse(grace.expiresAt) > now.getTime())) continue;
    seen.add(grace.secret);
    kept.push(grace);
  }
  return kept.sort((a, b) => Date.parse(b.expiresAt) - Date.parse(a.expiresAt));
}

/** Without the replaced secrets whose grace has ended at `now`; itself when it has none. */
export function withoutEndedGrace(merchant: Merchant, now: Date): Merchant {
  const live = (grace: GraceSecret) => Date.parse(grace.expiresAt) > now.getTime();
  if (!merchant.endpoints.some((endpoint) => endpoint.previousSecrets?.some((grace) => !live(grace)))) return merchant;
  const endpoints = merchant.endpoints.map((endpoint) => {
    if (!endpoint.previousSecrets?.some((grace) => !live(grace))) return endpoint;
    const { previousSecrets, ...rest } = endpoint;
    const kept = previousSecrets.filter(live);
    return kept.length > 0 ? { ...rest, previousSecrets: kept } : rest;
  });
  return { ...merchant, endpoints };
}
