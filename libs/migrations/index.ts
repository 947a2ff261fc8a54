/** Numbered SQL files applied by `webhooks migrate`, and the check every program makes at start-up. */
export { checksumOf, DECLARATION_SYNTAX, MIGRATIONS, type Migration, migrationOf, readMigrations, REQUIRED_VERSION, SQL_DIR } from './files.js';
export { fileOf } from './errors.js';
export { appliedSchema, type AppliedMigration, currentVersion, migrate } from './runner.js';
export { awaitSchema, awaitSchemaAt, checkSchema, SCHEMA_WAIT_MS, type SchemaGateOptions, type SchemaWaitState } from './gate.js';
