import { execFileSync } from 'node:child_process';
import { dropLeftDatabases } from '../support/databases.js';
import { removeRunTmpdir } from '../support/run-tmpdir.js';

export default async function globalTeardown(): Promise<void> {
  execFileSync('test/cluster/cluster.sh', ['stop'], { stdio: 'inherit', timeout: 60_000 });
  // The tests' databases are dropped in the background (test/support/databases.js): what is left, now.
  await dropLeftDatabases();
  removeRunTmpdir();
}
