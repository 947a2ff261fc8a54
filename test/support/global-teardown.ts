import { dropDatabaseTemplate, dropLeftDatabases } from './databases.js';
import { removeRunTmpdir } from './run-tmpdir.js';

export default async function globalTeardown(): Promise<void> {
  const container = (globalThis as Record<string, unknown>).__RABBITMQ_CONTAINER__ as { stop(): Promise<unknown> } | undefined;
  await container?.stop();
  await dropLeftDatabases();
  dropDatabaseTemplate();
  removeRunTmpdir();
}
