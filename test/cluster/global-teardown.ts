import { execFileSync } from 'node:child_process';

export default function globalTeardown(): void {
  execFileSync('test/cluster/cluster.sh', ['stop'], { stdio: 'inherit', timeout: 60_000 });
}
