/**
 * The broker's park of a message from dispatch (its delivery limit, a reject), from the entry x-death
 * holds for `queue`: its reason (delivery_limit, rejected, …), the exchange the message had been
 * published to (upstream's, or the default '' for our copies), the routing key it was published with
 * (the first of its routing-keys: our parks note theirs as x-original-routing-key), and when, in seconds. Never from
 * x-first-death-*: RabbitMQ 3.10 writes those only on a message with no x-death, so one upstream
 * republished from a dead-letter queue of its own keeps upstream's (its exchange, its reason), where
 * x-death gains an entry for our queue.
 */
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
 * Whether a copy the broker parked from dispatch is one upstream published, whose bookkeeping headers
 * are upstream's (never trusted): its entry names upstream's exchange, or its TTL ran out, which only
 * upstream's publish can carry (no copy of ours has an expiration, and dispatch has no TTL of its own).
 * The entry's exchange alone is not enough: on RabbitMQ 3.10 the broker parks a message that already
 * has an entry for this queue and reason by counting that entry, which keeps the exchange it names,
 * so an upstream that wrote one naming the default exchange passed its copy for one of ours. Intake
 * parks what upstream publishes with such an entry (parseIntake), so the broker finds one only on a
 * message no dispatcher took to intake: one that expired there (told here), or one each of whose
 * deliveries died before its intake (a crash loop of the dispatcher holding it unread: not told apart).
 */
export function parkedFromUpstream(park: { reason: string; exchange: string }, upstreamExchange: string): boolean {
  return park.exchange === upstreamExchange || park.reason === 'expired';
}
