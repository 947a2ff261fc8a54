import { execFileSync } from 'node:child_process';
import { useRunTmpdir } from '../support/run-tmpdir.js';

/** One three-node cluster for every cluster test file; its URLs reach the tests through the environment. */
export default function globalSetup(): void {
  if (process.getuid?.() !== 0) throw new Error('the cluster tests start rabbitmq-server nodes (as the rabbitmq user): run them as root');
  useRunTmpdir();
  // .ci/run starts the nodes while it installs (CLUSTER_STARTED=1): else they start here.
  if (process.env.CLUSTER_STARTED !== '1') execFileSync('test/cluster/cluster.sh', ['start'], { stdio: 'inherit', timeout: 300_000 });
  process.env.CLUSTER_URLS = execFileSync('test/cluster/cluster.sh', ['urls']).toString().trim();
}
