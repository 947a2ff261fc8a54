const TIME = `Times are ISO-8601 (2026-05-01T10:00:00Z; UTC when no offset is given) or a duration meaning
"that long ago" (30m, 2h, 7d).`;

const EXIT = 'Exit codes: 0 done, 1 failed (broker unreachable, queue missing), 2 usage error, 3 nothing matched.';

export const USAGE = `Usage: webhooks <command> [options]

Commands:
  publish --sample <charge.completed|payout|refund.completed|all> --merchant <id> [--count N]
  publish --file <event.json> [--message-id <id>] [--count N]
      Publishes to <TOPOLOGY_PREFIX>.events as upstream services do.
  token --merchant <id> [--ttl 1h]
      Prints a development access token for the resend API, signed with AUTH_JWT_SECRET.
  failed list [--merchant <id>] [--reference <ref>] [--since <time>] [--until <time>] [--all] [--limit N] [--json]
      Shows the failed webhooks of <TOPOLOGY_PREFIX>.failed.
  failed resend <reference> --merchant <id>
      Resends a merchant's failed webhooks for a reference, as the merchant's resend endpoint does.
  failed replay --merchant <id> --since <time> [--until <time>] [--dry-run] [--rate <per-second>]
      Resends every unresolved failure of a merchant in a time window, after an outage.
  invalid list [--code <code>] [--limit N] [--json]
      Shows the messages parked in <TOPOLOGY_PREFIX>.invalid without removing them.
  invalid requeue (--code <code> | --all) [--dry-run]
      Moves parked messages back to <TOPOLOGY_PREFIX>.dispatch once their cause is fixed.
  merchants list|get|set|rotate-secret
      Merchant webhook settings in <TOPOLOGY_PREFIX>.merchants (MERCHANT_DIRECTORY=broker), as the admin API.

Run "webhooks <command> --help" for one command's options.
Environment: RABBITMQ_URL, TOPOLOGY_PREFIX, and AUTH_JWT_SECRET for token.
${EXIT}`;

export const FAILED_USAGE = `Usage: webhooks failed <list|resend|replay> [options]

  failed list      shows failed webhooks
  failed resend    resends a merchant's failed webhooks for one reference
  failed replay    resends a merchant's failed webhooks of a time window

Run "webhooks failed <list|resend|replay> --help" for the options.`;

export const FAILED_LIST_USAGE = `Usage: webhooks failed list [--merchant <id>] [--reference <ref>] [--since <time>] [--until <time>]
                            [--all] [--limit N] [--json]

Reads <TOPOLOGY_PREFIX>.failed up to now and shows the unresolved failed webhooks, oldest first:
offset, failed-at, merchant, event, reference(s), webhook-id, attempts, last status, last error.

  --merchant <id>     only this merchant's
  --reference <ref>   only this reference (a refund is found by its refundRef or its tnxRef)
  --since <time>      only failures at or after this time (the read starts there, so it is fast)
  --until <time>      only failures before this time
  --all               resolved (already resent) failures too, with a RESOLVED column
  --limit N           the N most recent (default 500); a note on stderr says when some were left out
  --json              one JSON array on stdout, for scripts
  -h, --help          this help

${TIME}
Reading appends a checkpoint entry to the stream to know where "now" is; it changes nothing else.
${EXIT}`;

export const FAILED_RESEND_USAGE = `Usage: webhooks failed resend <reference> --merchant <id>

Does what the merchant's POST /nucleus/tnx/webhook?reference=<reference> does, for an operator:
republishes every unresolved failed webhook of that merchant and reference to <TOPOLOGY_PREFIX>.dispatch
with its original webhook-id and fresh attempt counters, and appends a resolution entry that every
API replica applies. Prints how many were resent.

  --merchant <id>     the merchant the webhooks belong to (required)
  -h, --help          this help

${EXIT} (3: nothing unresolved for this merchant and reference)`;

export const FAILED_REPLAY_USAGE = `Usage: webhooks failed replay --merchant <id> --since <time> [--until <time>] [--dry-run] [--rate <per-second>]

Bulk recovery after a merchant outage: resends every unresolved failed webhook of the merchant that
failed in the window, one reference at a time through the same resend as the API (a reference that
also has failures outside the window is resent whole, as the merchant's own resend would).
Shows progress on stderr and ends with a summary: resent, skipped (resolved meanwhile), errors.

  --merchant <id>     the merchant (required)
  --since <time>      start of the window (required)
  --until <time>      end of the window (default: now)
  --rate <n>          at most n webhooks a second (default 50)
  --dry-run           publish nothing; print what would be resent
  -h, --help          this help

${TIME}
${EXIT} (1 also when some resends failed; 3: nothing unresolved in the window)`;

export const INVALID_USAGE = `Usage: webhooks invalid <list|requeue> [options]

  invalid list      shows parked messages without removing them
  invalid requeue   moves parked messages back to dispatch

Run "webhooks invalid <list|requeue> --help" for the options.`;

const NO_REQUEUE = `How it reads the queue: every message present when the command starts is taken, handled, published
again (with a publisher confirm) and only then acknowledged. Nothing is ever returned with a
requeue: RabbitMQ 4.x quorum queues drop a message returned 20 times (delivery-limit), and a
message taken and left unacknowledged when a channel closes counts as returned. Messages keep their
order; ones parked while the command runs are left for the next run. Run one at a time per queue.`;

export const INVALID_LIST_USAGE = `Usage: webhooks invalid list [--code <code>] [--limit N] [--json]

Shows the messages parked in <TOPOLOGY_PREFIX>.invalid: code, reason, invalid-at, original routing
key, message id, body size and the first 200 characters of the body. Removes nothing.

  --code <code>       only this code: not-json, invalid-envelope, missing-reference, too-large,
                      unknown-merchant, internal-error
  --limit N           show at most N, in queue order (default 500)
  --json              one JSON array on stdout, for scripts
  -h, --help          this help

${NO_REQUEUE}
${EXIT}`;

export const INVALID_REQUEUE_USAGE = `Usage: webhooks invalid requeue (--code <code> | --all) [--dry-run]

After a fix upstream or in the merchants file, moves parked messages back to
<TOPOLOGY_PREFIX>.dispatch: body, messageId and headers kept, the x-invalid-* headers removed. If
the cause is not fixed, the dispatcher parks them again.

  --code <code>       move the messages with this code (see "invalid list --help")
  --all               move every parked message
  --dry-run           move nothing; print what would move
  -h, --help          this help

${NO_REQUEUE}
${EXIT} (3: no parked message matched)`;

export const MERCHANTS_USAGE = `Usage: webhooks merchants <list|get|set|rotate-secret> [options]

  merchants list            shows every merchant's webhook settings (never a secret)
  merchants get <id>        shows one merchant's
  merchants set <id> ...    creates or changes a merchant; a new webhook's secret is printed once
  merchants rotate-secret <id> [--grace 24h]
                            a new secret; both sign webhooks until the grace period ends

Settings live in <TOPOLOGY_PREFIX>.merchants, read by programs run with MERCHANT_DIRECTORY=broker.
Run "webhooks merchants <command> --help" for the options.`;

export const MERCHANTS_LIST_USAGE = `Usage: webhooks merchants list [--json]

Reads <TOPOLOGY_PREFIX>.merchants up to now and shows each merchant's settings. Secrets are never shown.
${EXIT}`;

export const MERCHANTS_GET_USAGE = `Usage: webhooks merchants get <merchant-id> [--json]

Shows one merchant's settings. Exit 3 when there is no such merchant.
${EXIT}`;

export const MERCHANTS_SET_USAGE = `Usage: webhooks merchants set <merchant-id> [--public-key <key>] [--url <https-url>] [--enable | --disable]
                              [--events <e1,e2> | --all-events] [--no-webhook]

Creates a merchant (--public-key and --url needed) or changes one; options left out keep their value.
--events takes charge.completed, payout, refund.completed. A webhook set up for the first time gets a
new whsec_ secret, printed once on stdout. URLs must be https (http with WEBHOOKS_DEV=true), without
credentials, and not a private address literal unless ALLOW_PRIVATE_TARGETS=true.
${EXIT}`;

export const MERCHANTS_ROTATE_USAGE = `Usage: webhooks merchants rotate-secret <merchant-id> [--grace <duration>]

Prints a new webhook secret. Until --grace (default 24h, at most 30d; 0 for none) has passed, webhooks
carry a signature with the new and with the previous secret, so the merchant can switch at any time.
${EXIT}`;
