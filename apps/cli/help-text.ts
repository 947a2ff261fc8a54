/** Help text shared by several commands; each command's options come from its declaration. */

export const TIME = `Times are ISO-8601 (2026-05-01T10:00:00Z; UTC when no offset is given) or a duration meaning
"that long ago" (30m, 2h, 7d).`;

export const EXIT = 'Exit codes: 0 done, 1 failed (broker unreachable, queue missing), 2 usage error, 3 nothing matched.';

export const ENVIRONMENT = `Environment: RABBITMQ_URL, and TOPOLOGY_PREFIX (default webhooks): give the one the programs run
with (export it in every terminal), or the commands look at another topology. token reads
AUTH_JWT_SECRET (the development secret with WEBHOOKS_DEV=true), AUTH_JWT_ISSUER and AUTH_JWT_AUDIENCE.`;

export const NO_REQUEUE = `How it reads the queue: every message present when the command starts is taken, handled, published
again (with a publisher confirm) and only then acknowledged. Nothing is ever returned with a
requeue: RabbitMQ 4.x quorum queues drop a message returned 20 times (delivery-limit), and a
message taken and left unacknowledged when a channel closes counts as returned. Messages keep their
order; ones parked while the command runs are left for the next run. Run one at a time per queue.`;
