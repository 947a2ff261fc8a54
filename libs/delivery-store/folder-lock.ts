import { linkSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { NamedError } from '../runtime/named-error.js';

/** Another live process holds the embedded database's folder: opening it too would lose committed rows. */
export class EmbeddedDatabaseInUseError extends NamedError {
  constructor(dir: string, lockFile: string, pid: number | undefined) {
    const holder = pid === undefined ? 'another process' : `process ${pid}`;
    super(
      `the embedded database ${dir} is in use by ${holder} (another npm start, or a program started with WEBHOOKS_DEV=true and no DATABASE_URL): ` +
        `stop it first, or give this one a DATABASE_URL. If it no longer runs, delete ${lockFile}`,
    );
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, under another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const heldHere = new Set<string>();

function holderOf(lockFile: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(lockFile, 'utf8'), 10);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Nothing in PGlite stops two processes from opening one data folder, each writing over the other's
 * commits. `<dir>.lock` holds the owner's pid, linked into place from a file of this process's own,
 * so that it never exists empty and only one link wins. One whose process is gone is taken over.
 * Returns the release.
 */
export function lockFolder(dir: string): () => void {
  const lockFile = `${dir}.lock`;
  const mine = `${lockFile}.${process.pid}`;
  writeFileSync(mine, `${process.pid}\n`);
  try {
    for (let tries = 0; ; tries++) {
      try {
        linkSync(mine, lockFile);
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        const holder = holderOf(lockFile);
        // This process's own pid is stale unless it locked it here (a restarted container reuses pids).
        const held = holder === process.pid ? heldHere.has(lockFile) : holder !== undefined && alive(holder);
        if (held || tries >= 2) throw new EmbeddedDatabaseInUseError(dir, lockFile, holder);
        rmSync(lockFile, { force: true });
      }
    }
  } finally {
    rmSync(mine, { force: true });
  }
  heldHere.add(lockFile);
  return () => {
    if (!heldHere.delete(lockFile)) return;
    if (holderOf(lockFile) === process.pid) rmSync(lockFile, { force: true });
  };
}
