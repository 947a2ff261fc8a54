/**
 * The schema: numbered SQL files (sql/NNNN_name.sql), applied by `webhooks migrate`, and the check
 * every program makes at start-up. No program changes the schema (development mode's embedded
 * database, which has no operator, is migrated by the program that opens it).
 */
export { checksumOf, MIGRATIONS, type Migration, REQUIRED_VERSION, SQL_DIR } from './files.js';
export { fileOf } from './errors.js';
export { currentVersion, migrate } from './runner.js';
export { awaitSchema, awaitSchemaAt, checkSchema, SCHEMA_WAIT_MS, type SchemaGateOptions, type SchemaWaitState } from './gate.js';
