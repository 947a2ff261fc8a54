import { execFileSync } from 'node:child_process';
import { removeRunTmpdir } from '../support/run-tmpdir.js';

export default function globalTeardown(): void {
  execFileSync('test/cluster/cluster.sh', ['stop'], { stdio: 'inherit', timeout: 60_000 });
  removeRunTmpdir();
}
