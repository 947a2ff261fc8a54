import { type AppliedMigration, appliedSchema, fileOf, MIGRATIONS, migrate, REQUIRED_VERSION } from '../../libs/migrations/index.js';
import { withPostgres } from './broker.js';
import { CliCommand, type CliContext, writeLine } from './command.js';

export function declareMigrate(program: CliCommand): void {
  program
    .command('migrate')
    .summary('apply the numbered SQL migrations to DATABASE_URL (once per release, before the programs)')
    .description(
      "Brings the schema of DATABASE_URL's PostgreSQL to this release's version: applies each numbered SQL migration " +
        '(libs/migrations/sql) not applied yet, in order, each in one transaction, and records it in schema_migrations. ' +
        'Run it once per release, before starting or rolling the programs: they wait for the version they need and ' +
        'never change the schema. Safe to run twice, and from two machines at once (one waits for the other). ' +
        'A migration whose opening comment has the line "-- runs with releases from: NNNN" is recorded with that version: ' +
        'the programs (and this command) of a release whose latest migration is NNNN or later accept a database it was ' +
        'applied to, and run beside it; a migration without it is refused by every release that does not know it, and ' +
        'releases before 0025 refuse every newer schema. ' +
        "Development mode's embedded database (npm start without DATABASE_URL) is migrated by the program that opens it.",
    )
    .option('--status', 'print the version the database holds and the one this release needs, and the newer migrations (a newer release\'s) it runs beside; apply nothing', false)
    .addHelpText('after', '\nExit codes: 0 done (with --status: the database holds the version needed, or a newer one whose newer migrations all run with this release), 1 failed (a migration refused, a file changed after it ran, a newer schema with a migration that does not run with this release, PostgreSQL unreachable), 2 usage error, 3 --status: migrations to apply.')
    .handle((raw: { status: boolean }) => raw, run);
}

async function run(options: { status: boolean }, ctx: CliContext): Promise<number | void> {
  const needs = "migrate needs DATABASE_URL: the PostgreSQL the programs use (npm start's embedded database migrates itself)";
  // No statement timeout: a migration of a large table, or the wait for another run, takes what it takes.
  const settings = { maxConnections: 1, statementTimeoutMs: 0, connectTimeoutMs: 10_000, applicationName: 'webhooks-cli migrate', schema: false } as const;
  return withPostgres(ctx.config.DATABASE_URL, needs, settings, async (database) => {
    if (options.status) {
      // Checked as `migrate` checks first: what it refuses exits 1 here too, never 0 nor 3.
      const { version: current, newer } = await appliedSchema(database);
      writeLine(ctx.stdout, `schema version ${current}, this release needs ${REQUIRED_VERSION}`);
      sayNewer(ctx, newer);
      const pending = MIGRATIONS.filter((m) => m.version > current);
      for (const migration of pending) writeLine(ctx.stdout, `pending: ${fileOf(migration)}`);
      return pending.length > 0 ? 3 : 0;
    }
    const { applied, version, newer } = await migrate(database, MIGRATIONS, { onWait: () => writeLine(ctx.stderr, 'webhooks: waiting for another webhooks migrate on this database to finish') });
    sayNewer(ctx, newer);
    for (const migration of applied) writeLine(ctx.stdout, `applied ${fileOf(migration)}`);
    writeLine(ctx.stdout, applied.length > 0 ? `schema version ${version}` : `schema version ${version}: nothing to apply`);
  });
}

/** A newer release's migrations that declare this release runs beside them. */
function sayNewer(ctx: CliContext, newer: readonly AppliedMigration[]): void {
  for (const migration of newer) writeLine(ctx.stdout, `newer: ${fileOf(migration)}, runs with releases from ${migration.runsWithFrom}`);
}
