import { deleteMerchantData, firstIssue, listAudit, type MerchantInput, merchantInputSchema, MerchantSweepFailedError, type MerchantView, resealSecrets, withCurrentRate, withCurrentRates } from '../../libs/merchants/index.js';
import { CliCommand, EXIT, formatTable, NothingMatchedError, parseLimit, printListing, UsageError, writeLine } from './command.js';
import { declareEndpoints, endpointTable } from './endpoints.js';
import { CLI_ACTOR, merchantId, newMerchantId, withDatabase, withSealedStore, withSettings } from './merchant-store.js';

function table(views: MerchantView[]): string {
  return formatTable(
    ['MERCHANT', 'PUBLIC KEY', 'ENDPOINTS', 'ENABLED'],
    views.map((v) => [v.id, v.publicKey, String(v.endpoints.length), String(v.endpoints.filter((endpoint) => endpoint.enabled).length)]),
  );
}

/** Endpoints that are off, each on a line: why (failing: auto-disable; manual), since when, and since when they failed. */
function disabledTable(views: MerchantView[]): string {
  return formatTable(
    ['MERCHANT', 'ENDPOINT', 'REASON', 'DISABLED AT', 'FAILING SINCE', 'URL'],
    views.flatMap((v) => v.endpoints.filter((e) => !e.enabled).map((e) => [v.id, e.id, e.disabledReason ?? 'manual', e.disabledAt ?? '-', e.failingSince ?? '-', e.url])),
  );
}

/** An audit entry's changes on one line: a field's new value, or what was recorded of it (a secret: only that it rotated). */
function changesOf(changes: Record<string, unknown>): string {
  return Object.entries(changes)
    .map(([field, change]) => (typeof change === 'object' && change && 'to' in change ? `${field}=${JSON.stringify((change as { to: unknown }).to)}` : `${field}:${JSON.stringify(change)}`))
    .join(' ');
}

export function declareMerchants(program: CliCommand): void {
  const merchants = program
    .command('merchants')
    .usage('<list|get|set|endpoints|audit|reseal|delete> [options]')
    .description('Merchants and their endpoints in PostgreSQL (DATABASE_URL, SECRETS_KEY), as the admin API.')
    .addHelpText('after', '\nSettings live in the merchants table of DATABASE_URL; every program sees a change within a second.');

  merchants
    .command('list')
    .summary('shows every merchant and how many of its endpoints are on (never a secret)')
    .description("Shows each merchant from PostgreSQL: its public key and its endpoints (--json: each endpoint's settings). Secrets are never shown.")
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .option('--disabled', 'only endpoints that are off, one a line: why (failing: disabled automatically after ENDPOINT_DISABLE_AFTER; manual) and since when', false)
    .addHelpText('after', `\n${EXIT}`)
    .handle((raw: { json: boolean; disabled: boolean }) => raw, async ({ json, disabled }, ctx) => {
      // Each endpoint at the rate it is sent at now, as the admin API shows it.
      const all = await withSettings(ctx, 'read', async (settings, database) => withCurrentRates(database, settings.list()));
      // --disabled: each merchant with an endpoint off, and only those endpoints (a script acts on each one listed).
      const views = disabled ? all.map((v) => ({ ...v, endpoints: v.endpoints.filter((endpoint) => !endpoint.enabled) })).filter((v) => v.endpoints.length > 0) : all;
      printListing(ctx, json, views, disabled ? 'no disabled endpoint' : 'no merchant in the database', () => (disabled ? disabledTable(views) : table(views)));
    });

  merchants
    .command('get')
    .summary('shows one merchant and its endpoints')
    .description("Shows one merchant: its public key and its endpoints (never a secret).")
    .argument('<merchant-id>')
    .option('--json', 'one JSON object on stdout, for scripts', false)
    .addHelpText('after', `\n${EXIT} (3: no such merchant)`)
    .handle((raw: { json: boolean }, args) => ({ id: merchantId(args), json: raw.json }), async (options, ctx) => {
      const view = await withSettings(ctx, 'read', async (settings, database) => {
        const found = settings.get(options.id);
        return found && withCurrentRate(database, found);
      });
      if (!view) throw new NothingMatchedError(`no merchant ${options.id}`);
      writeLine(ctx.stdout, options.json ? JSON.stringify(view) : table([view]));
      if (!options.json && view.endpoints.length > 0) writeLine(ctx.stdout, `\n${endpointTable(view.endpoints)}`);
    });

  merchants
    .command('set')
    .summary("creates a merchant or changes its public key; its endpoints are `merchants endpoints`")
    .description(
      'Creates a merchant (--public-key needed) or changes its public key. A merchant sends nothing until it has ' +
        'an endpoint: add one with `webhooks merchants endpoints add` (its secret is printed once there).',
    )
    .argument('<merchant-id>', '1 to 200 letters, digits, ".", "_", ":" or "-", starting with a letter or digit (the admin API\'s rule)')
    .option('--public-key <key>', 'the key the merchant sends as x-auth-token (8 to 512 characters, unique)')
    .addHelpText('after', `\n${EXIT}`)
    .handle(
      (raw: { publicKey?: string }, args) => ({ id: newMerchantId(args), publicKey: raw.publicKey }),
      async (options, ctx) => {
        const result = await withSettings(ctx, 'write', async (settings) => {
          const publicKey = options.publicKey ?? settings.get(options.id)?.publicKey;
          if (publicKey === undefined) throw new UsageError(`merchant ${options.id} is new: give --public-key`);
          const parsed = merchantInputSchema.safeParse({ publicKey });
          if (!parsed.success) throw firstIssue(parsed.error);
          return settings.put(options.id, parsed.data as MerchantInput, { actor: CLI_ACTOR });
        });
        writeLine(ctx.stdout, table([result.view]));
        writeLine(ctx.stderr, `merchant ${options.id} ${result.created ? 'created' : 'updated'}${result.view.endpoints.length === 0 ? '; add an endpoint with `webhooks merchants endpoints add`' : ''}`);
      },
    );

  merchants
    .command('audit')
    .summary("shows who changed a merchant's settings, what and when")
    .description(
      "The merchant's audit trail, newest first: every settings write (admin API, portal, CLI, auto-disable), secret " +
        'rotation, portal link minted and revocation of portal sessions, with who made it (admin:<token sub>, ' +
        'portal:<session>, cli, service), what changed by field (a secret only as rotated) and from which address.',
    )
    .argument('<merchant-id>')
    .option('--limit <n>', 'entries at most', '50')
    .option('--json', 'one JSON array on stdout, for scripts', false)
    .addHelpText('after', `\n${EXIT} (3: nothing recorded for this merchant)`)
    .handle(
      (raw: { limit: string; json: boolean }, args) => ({ id: merchantId(args), limit: parseLimit(raw.limit, 500), json: raw.json }),
      async (options, ctx) => {
        const entries = await withSealedStore(ctx, (database) => listAudit(database, options.id, options.limit));
        printListing(ctx, options.json, entries, `nothing recorded for merchant ${options.id}`, () =>
          formatTable(['AT', 'ACTOR', 'ACTION', 'ADDRESS', 'CHANGES'], entries.map((e) => [e.at, e.actor, e.action, e.address ?? '-', changesOf(e.changes)])),
        );
      },
    );

  merchants
    .command('reseal')
    .summary('seals every stored secret with SECRETS_KEY, after rotating it')
    .description(
      'The last step of a rotation of SECRETS_KEY: with the new key in SECRETS_KEY and the old one in ' +
        'SECRETS_KEY_PREVIOUS (and every program restarted with both), seals again with the new key every stored ' +
        'secret the old one sealed. Settings are not changed. Afterwards SECRETS_KEY_PREVIOUS can be removed. A value ' +
        'neither key opens stops it (exit 1), named by its merchant and endpoints (or its Idempotency-Key), never shown.',
    )
    .addHelpText('after', `\n${EXIT}`)
    .handle(() => ({}), async (_options, ctx) => {
      const count = await withSealedStore(ctx, (database, box) => resealSecrets(database, box));
      writeLine(ctx.stderr, `${count} stored secret(s) sealed again with SECRETS_KEY; no secret is sealed with another key now`);
    });

  merchants
    .command('delete')
    .summary("deletes a merchant and every row of its data from PostgreSQL, in one transaction")
    .description(
      "Deletes the merchant and its data from every table of DATABASE_URL in one transaction: settings and sealed " +
        'secrets, Idempotency-Key answers, rate-limit counters, portal links and sessions, the delivery log (webhooks, ' +
        'payloads, attempts, quarantined records), failed webhooks, waiting webhooks and their open circuits, its order ' +
        "per reference, its endpoints' failing clocks and adaptive rates, and its upstream events' intake keys; the audit trail is kept and " +
        'records the delete. Then, when it deleted anything, it sweeps the same tables again 2 s later, for a write that raced the delete (its statement ' +
        'begun before the commit), unless a merchant of that id was made again meanwhile. Prints the rows deleted per table, both passes together. RabbitMQ is not touched: messages of this merchant still in dispatch ' +
        'are dropped when a dispatcher takes them (not sent, parked or failed), its entries in the streams age out, and the recorder ' +
        'stores none of its records read after the delete. Running programs forget the merchant within a second (the delete ' +
        'notifies them), or at their next poll (10 s) when the notification is lost: a tombstone of the merchant ' +
        '(a digest of its id, counted for a day) tells them. --yes is required.',
    )
    .argument('<merchant-id>')
    .option('--yes', 'really delete: nothing can bring the data back but a backup', false)
    .addHelpText('after', `\n${EXIT} (3: no row of this merchant in any table; 1 also when the delete committed but its sweep failed: the table is printed, run it again)`)
    .handle(
      (raw: { yes: boolean }, args) => {
        const id = merchantId(args);
        if (!raw.yes) throw new UsageError(`give --yes to delete merchant ${id} and all its data`);
        return { id };
      },
      async ({ id }, ctx) => {
        const needs = 'merchants delete needs DATABASE_URL: merchants and their data live in PostgreSQL';
        // No statement timeout, as migrate: a large merchant's DELETE of its delivery log outlasts the programs' 30 s,
        // and the one transaction would roll back on every run.
        let sweep: MerchantSweepFailedError | undefined;
        const deleted = await withDatabase(ctx, needs, (database) => deleteMerchantData(database, id, CLI_ACTOR), { statementTimeoutMs: 0 }).catch((err: unknown) => {
          // The delete stands: its table is printed, and the operator told it happened, not only that something failed.
          if (!(err instanceof MerchantSweepFailedError)) throw err;
          sweep = err;
          return err.deleted;
        });
        const total = Object.values(deleted).reduce((sum, n) => sum + n, 0);
        writeLine(ctx.stdout, formatTable(['TABLE', 'ROWS DELETED'], Object.entries(deleted).map(([table, n]) => [table, String(n)])));
        if (sweep) {
          const why = (sweep.cause as Error)?.message ?? String(sweep.cause);
          throw new Error(`merchant ${id}: ${total} row(s) deleted and committed; the sweep 2 s later, for a write that raced the delete, failed (${why}): run \`webhooks merchants delete ${id} --yes\` again`, { cause: sweep });
        }
        if (total === 0) throw new NothingMatchedError(`no row of merchant ${id} in any table`);
        writeLine(ctx.stderr, `merchant ${id}: ${total} row(s) deleted; running programs forget it within 10 s (each logs "merchant deleted; no longer served")`);
      },
    );

  declareEndpoints(merchants);
}
