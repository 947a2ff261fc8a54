import { setTimeout as sleep } from 'node:timers/promises';
import { WEBHOOK_STATUSES } from '../../libs/delivery-log/index.js';
import { type DeliveryLogQueries, deliveryLogQueries, onEndpoint, type WebhookDetail, type WebhookSummary } from '../../libs/delivery-store/index.js';
import { withPostgres } from './broker.js';
import { checkEndpointId, checkMerchantId, checkReference, CliCommand, type CliContext, EXIT, formatTable, parseLimit, printListing, truncate, UsageError, writeLine } from './command.js';
import { adminApiBase, adminToken, callAdminApi } from './token.js';

export function declareLog(program: CliCommand): void {
  program
    .command('log')
    .summary("what happened to a merchant's webhooks: each one's attempts, from the delivery log")
    .description(
      'Reads the delivery log in PostgreSQL (DATABASE_URL), or, without DATABASE_URL, through the running API\'s admin routes ' +
        '(WEBHOOKS_API_URL, default http://127.0.0.1:<ADMIN_PORT or PORT or 8080>: beside `npm start`, whose database lives in its process). With --webhook-id or --reference: each webhook with a ' +
        'timeline of its records (every attempt with its time, duration, HTTP status, error and the first bytes of the ' +
        'answer, and each time none was made and why). Otherwise the merchant\'s latest webhooks, newest first. ' +
        'The log is fed from a stream and may be a few seconds behind.',
    )
    .requiredOption('--merchant <id>', 'the merchant whose log to read')
    .option('--reference <ref>', 'the webhooks of this reference, with their timelines')
    .option('--webhook-id <id>', 'this webhook, with its timeline')
    .option('--status <status>', `only webhooks in this status: ${WEBHOOK_STATUSES.join(', ')}`)
    .option('--endpoint <id>', 'only deliveries to this endpoint (ep_…): a webhook is one delivery per endpoint')
    .option('--limit <n>', 'at most this many webhooks (newest first)', '50')
    .option('--json', 'JSON on stdout, for scripts', false)
    .addHelpText(
      'after',
      "\nEnvironment: DATABASE_URL (the delivery log's PostgreSQL); without it WEBHOOKS_API_URL (the API, default http://127.0.0.1:<ADMIN_PORT or PORT or 8080>) " +
        `and WEBHOOKS_ADMIN_TOKEN (an admin token; else one signed with AUTH_JWT_SECRET or the development secret).\n${EXIT}`,
    )
    .handle(check, run);
}

function check(raw: { merchant?: string; reference?: string; webhookId?: string; status?: string; endpoint?: string; limit: string; json: boolean }) {
  const merchant = checkMerchantId(raw.merchant);
  if (raw.status !== undefined && !(WEBHOOK_STATUSES as readonly string[]).includes(raw.status)) {
    throw new UsageError(`--status must be one of ${WEBHOOK_STATUSES.join(', ')}`);
  }
  if (raw.webhookId !== undefined && (raw.webhookId.length === 0 || raw.webhookId.length > 200)) throw new UsageError('--webhook-id takes 1 to 200 characters');
  // One webhook is shown as it is: a filter beside it would be silently passed over (--endpoint picks its delivery).
  for (const [option, given] of [['--reference', raw.reference], ['--status', raw.status]] as const) {
    if (raw.webhookId !== undefined && given !== undefined) throw new UsageError(`--webhook-id names one webhook; give it without ${option}`);
  }
  return {
    ...raw,
    merchant,
    reference: raw.reference === undefined ? undefined : checkReference(raw.reference),
    endpointId: raw.endpoint === undefined ? undefined : checkEndpointId(raw.endpoint),
    limit: parseLimit(raw.limit, 100),
  };
}

function summaryRow(w: WebhookSummary): string[] {
  return [
    w.firstSeenAt,
    w.webhookId,
    w.endpointId ?? '-',
    w.event,
    w.references.join(','),
    w.status,
    String(w.attempts),
    w.lastHttpStatus === null ? '-' : String(w.lastHttpStatus),
    w.nextAttemptAt ?? '-',
    truncate(w.lastError ?? '', 60),
  ];
}

/** One webhook and its records, each delivery's in its own order: what support reads to answer "did they get it?". */
function timeline(w: WebhookDetail): string {
  // Repeats upstream published within INTAKE_DEDUPE_WINDOW, acked without delivery: said only when there were some.
  const repeats = w.duplicates > 0 ? `, ${w.duplicates} repeat(s) dropped at intake, last ${w.lastDuplicateAt}` : '';
  const head = `${w.webhookId}  ${w.event}  ${w.references.join(',')}  first seen ${w.firstSeenAt}  ${w.status}, ${w.attempts} attempt(s)${repeats}`;
  const rows = w.records.map((r) => [
    r.startedAt ?? r.at,
    r.outcome,
    r.startedAt ? `#${r.attemptNumber}` : '-',
    r.durationMs === null ? '-' : `${r.durationMs} ms`,
    r.httpStatus === null ? '-' : String(r.httpStatus),
    r.endpointId ?? '-',
    truncate([r.error, r.reason, r.nextAttemptAt ? `next ${r.nextAttemptAt}` : null, r.responseBody ? `body ${JSON.stringify(r.responseBody)}` : null].filter(Boolean).join('; '), 100),
  ]);
  return `${head}\n${formatTable(['TIME', 'OUTCOME', 'ATTEMPT', 'DURATION', 'STATUS', 'ENDPOINT', 'DETAIL'], rows)}`;
}

type LogOptions = ReturnType<typeof check>;

/** DATABASE_URL when set (checked as `failed` checks it); else the running API's admin routes. */
async function run(options: LogOptions, ctx: CliContext): Promise<void> {
  if (!ctx.env.DATABASE_URL?.trim()) return show(options, ctx, await apiLogSource(ctx));
  const needs = 'log needs DATABASE_URL or the API';
  return withPostgres(ctx.config.DATABASE_URL, needs, { maxConnections: 2, applicationName: 'webhooks-cli log' }, (database) =>
    show(options, ctx, deliveryLogQueries(database)),
  );
}

async function show(options: LogOptions, ctx: CliContext, log: LogSource): Promise<void> {
  const { merchant, reference, webhookId, status, endpointId, limit, json } = options;
  const nothing = 'no webhook in the delivery log matches';
  if (webhookId) {
    const detail = await log.getWebhook(merchant, webhookId);
    const shown = detail && (endpointId === undefined ? detail : onEndpoint(detail, endpointId));
    const details = shown ? [shown] : [];
    printListing(ctx, json, details, nothing, () => details.map(timeline).join('\n\n'));
  } else if (reference) {
    const { webhooks } = await log.listWebhookDetails(merchant, { reference, status, endpointId, limit });
    printListing(ctx, json, webhooks, nothing, () => webhooks.map(timeline).join('\n\n'));
  } else {
    const page = await log.listWebhooks(merchant, { status, endpointId, limit });
    printListing(ctx, json, page.webhooks, nothing, () =>
      formatTable(['FIRST SEEN', 'WEBHOOK-ID', 'ENDPOINT', 'EVENT', 'REFERENCES', 'STATUS', 'ATTEMPTS', 'LAST', 'NEXT', 'LAST ERROR'], page.webhooks.map(summaryRow)),
    );
    if (page.nextCursor) writeLine(ctx.stderr, `showing the ${page.webhooks.length} most recent; raise --limit or add --status to see others`);
  }
}

type LogSource = Pick<DeliveryLogQueries, 'getWebhook' | 'listWebhooks' | 'listWebhookDetails'>;

type Page = { webhooks: WebhookSummary[]; nextCursor: string | null };

// Enough of the API's answers for the table and the timelines to be made of them.
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const isSummary = (value: unknown): value is WebhookSummary => isObject(value) && typeof value.webhookId === 'string' && Array.isArray(value.references);
const isDetail = (value: unknown): value is WebhookDetail => {
  const { records, deliveries } = isSummary(value) ? (value as { records?: unknown; deliveries?: unknown }) : {};
  return Array.isArray(records) && records.every(isObject) && Array.isArray(deliveries) && deliveries.every(isObject);
};
const isPage = (value: unknown): value is Page => isObject(value) && Array.isArray(value.webhooks) && value.webhooks.every(isSummary);

/** A webhook id as one path segment: `.` and `..` are ids too, so dots are escaped (%2E, which the API decodes). */
function pathSegment(id: string): string {
  return encodeURIComponent(id).replaceAll('.', '%2E');
}

/** How long in all `webhooks log` waits when the API says to (429 with Retry-After) before it gives its answer. */
const MAX_WAIT_FOR_API_MS = 60_000;

async function apiLogSource(ctx: CliContext): Promise<LogSource> {
  const base = adminApiBase(ctx.env);
  const token = await adminToken(ctx.env);
  let waited = 0;
  const unreachable = () =>
    new Error(
      `DATABASE_URL is not set, and no API answers at ${base.origin}: set DATABASE_URL to read the delivery log in PostgreSQL, ` +
        'or start the API (npm start) or set WEBHOOKS_API_URL to one that runs',
    );
  const get = async <T>(route: string, query: Record<string, string>, isAnswer: (data: unknown) => data is T, notFoundIsNone = false): Promise<T | undefined> => {
    let answer: Awaited<ReturnType<typeof callAdminApi>>;
    for (;;) {
      answer = await callAdminApi(base, token, 'GET', route, { query, timeoutMs: 15_000, unreachable });
      // Past the API's bound on a merchant's reads (LOG_RATE_LIMIT), told how long to wait, it waits.
      const wait = answer.status === 429 ? Number(answer.headers['retry-after'] ?? NaN) * 1000 : NaN;
      if (!(wait >= 0 && waited + wait <= MAX_WAIT_FOR_API_MS)) break;
      await sleep(wait);
      waited += wait;
    }
    const { status, message, code, data } = answer;
    if (status >= 200 && status < 300) {
      // A proxy's sign-in page, another service at that address: said, never read as a log (nor as an empty one).
      if (!isAnswer(data)) throw new Error(`the API at ${base.origin} answered ${status} without the delivery log: is WEBHOOKS_API_URL the webhooks API's address?`);
      return data;
    }
    if (status === 404 && notFoundIsNone && code === 'webhook_not_found') return undefined;
    if (status === 401 || status === 403) {
      throw new Error(`the API at ${base.origin} refused the CLI's token (${status}): set WEBHOOKS_ADMIN_TOKEN to an admin token, or AUTH_JWT_SECRET to the API's`);
    }
    throw new Error(`the API at ${base.origin} answered ${status}: ${message ?? 'no message'}`);
  };
  const source: LogSource = {
    getWebhook: (merchantId, webhookId) => get(`/admin/merchants/${encodeURIComponent(merchantId)}/webhooks/${pathSegment(webhookId)}`, {}, isDetail, true),
    async listWebhooks(merchantId, filters) {
      const query: Record<string, string> = { limit: String(filters.limit) };
      for (const name of ['reference', 'status', 'event', 'endpointId'] as const) if (filters[name] !== undefined) query[name] = String(filters[name]);
      return (await get(`/admin/merchants/${encodeURIComponent(merchantId)}/webhooks`, query, isPage))!;
    },
    async listWebhookDetails(merchantId, filters) {
      const page = await source.listWebhooks(merchantId, filters);
      // One at a time: the API answers 429 past a merchant's few reads in flight.
      const details: WebhookDetail[] = [];
      for (const w of page.webhooks) {
        const detail = await source.getWebhook(merchantId, w.webhookId);
        // The list's item is one delivery: its detail shows that delivery, as the database's answer does.
        const delivery = detail && onEndpoint(detail, w.endpointId);
        if (delivery) details.push(delivery);
      }
      return { webhooks: details, nextCursor: page.nextCursor };
    },
  };
  return source;
}
