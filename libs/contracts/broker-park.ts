/** The broker's park of a message from `queue`, from its x-death entry; never x-first-death-*, which may be upstream's. */
export function brokerPark(headers: Record<string, unknown> | undefined, queue: string) {
  const deaths = headers?.['x-death'];
  if (!Array.isArray(deaths)) return undefined;
  for (const death of deaths as unknown[]) {
    if (typeof death !== 'object' || death === null) continue;
    const { queue: from, reason, exchange, time, 'routing-keys': keys } = death as Record<string, unknown>;
    if (from !== queue || typeof reason !== 'string' || typeof exchange !== 'string') continue;
    const seconds = typeof time === 'number' ? time : (time as { value?: unknown } | undefined)?.value;
    const routingKey = Array.isArray(keys) && typeof keys[0] === 'string' ? keys[0] : undefined;
    return { reason, exchange, routingKey, time: typeof seconds === 'number' ? seconds : undefined };
  }
  return undefined;
}

/**
 * Whether a copy the broker parked from dispatch is upstream's: its entry names upstream's exchange,
 * or its TTL ran out (no copy of ours has an expiration; RabbitMQ 3.10 keeps upstream's entry).
 */
export function parkedFromUpstream(park: { reason: string; exchange: string }, upstreamExchange: string): boolean {
  return park.exchange === upstreamExchange || park.reason === 'expired';
}
