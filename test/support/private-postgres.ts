import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { migrateDatabase } from './postgres.js';
import { freePort } from './receiver.js';

const run = promisify(execFile);
const BIN = process.env.PG_BIN_DIR ?? '/usr/lib/postgresql/15/bin';

/** A new folder under tmpdir() that `asUser` owns (root cannot run a PostgreSQL server: the Debian package's postgres user does). */
async function ownedFolder(prefix: string, asUser: string[]): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  if (asUser.length > 0) {
    const ids = await Promise.all(['-u', '-g'].map(async (flag) => Number((await run('id', [flag, 'postgres'])).stdout.trim())));
    chmodSync(dir, 0o700);
    chownSync(dir, ids[0]!, ids[1]!);
  }
  return dir;
}

/**
 * A PostgreSQL server of a test's own, in a temporary folder, that the test may crash
 * (`pg_ctl stop -m immediate`) without touching the machine's server that other tests use. Its
 * WAL writer waits 10 s between flushes, so that asynchronous commits are still in memory when it
 * is crashed, as after a power cut or a failover to an asynchronous replica.
 */
export class PrivatePostgres {
  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly asUser: string[],
  ) {}

  /** undefined where initdb is not installed (PG_BIN_DIR), or cannot run here. */
  static async start(): Promise<PrivatePostgres | undefined> {
    if (!existsSync(join(BIN, 'initdb'))) return undefined;
    const asUser = process.getuid?.() === 0 ? ['runuser', '-u', 'postgres', '--'] : [];
    const pg = new PrivatePostgres(await ownedFolder('private-pg-', asUser), await freePort(), asUser);
    // Its `postgres` database as `webhooks migrate` leaves it before the programs start: a copy of
    // a data directory made so once (initdb and the migrations are seconds of CPU each time).
    await run(...pg.shell(['cp', '-a', await PrivatePostgres.template(asUser), join(pg.dir, 'data')]));
    await pg.up();
    return pg;
  }

  /**
   * A stopped server's data directory, initdb'd and migrated, that each private server starts from
   * a copy of: one per PostgreSQL binaries and migrations (their contents name it), made by the
   * first test that needs it and kept under tmpdir() for the next ones and the next runs. Two files
   * making it at once each make one; the first renamed into place is kept.
   */
  private static async template(asUser: string[]): Promise<string> {
    const sql = new URL('../../libs/migrations/sql/', import.meta.url);
    const hash = createHash('sha256').update(BIN);
    for (const file of readdirSync(sql).sort()) hash.update(file).update(readFileSync(new URL(file, sql)));
    const kept = join(tmpdir(), `private-pg-template-${hash.digest('hex').slice(0, 16)}`);
    if (existsSync(kept)) return kept;
    const maker = new PrivatePostgres(await ownedFolder('private-pg-template-making-', asUser), await freePort(), asUser);
    try {
      await maker.exec('initdb', ['-D', join(maker.dir, 'data'), '-A', 'trust', '-U', 'postgres', '--no-sync']);
      await maker.up();
      await migrateDatabase(maker.url);
      await maker.exec('pg_ctl', ['-D', join(maker.dir, 'data'), '-m', 'fast', '-w', 'stop']);
      try {
        renameSync(join(maker.dir, 'data'), kept);
      } catch (err) {
        if (!existsSync(kept)) throw err;
      }
      return kept;
    } finally {
      await maker.stop();
    }
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  private exec(tool: string, args: string[]): Promise<unknown> {
    const [cmd, ...rest] = [...this.asUser, join(BIN, tool), ...args];
    return run(cmd!, rest, { timeout: 60_000 });
  }

  async up(): Promise<void> {
    const options = [
      `-p ${this.port}`,
      `-k ${this.dir}`,
      '-c listen_addresses=127.0.0.1',
      '-c wal_writer_delay=10000ms',
      '-c wal_writer_flush_after=1GB',
      '-c wal_buffers=64MB',
    ].join(' ');
    await this.exec('pg_ctl', ['-D', join(this.dir, 'data'), '-o', options, '-l', join(this.dir, 'log'), '-w', 'start']);
  }

  /** SIGQUIT to the server: what its WAL buffers held is lost, as in a crash. */
  async crash(): Promise<void> {
    await this.exec('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'immediate', 'stop']);
  }

  /** A clean restart (`pg_ctl restart -m fast`, as `pg_ctlcluster restart` does): every connection is closed. */
  async restart(): Promise<void> {
    await this.exec('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'fast', '-w', 'stop']);
    await this.up();
  }

  /**
   * A cold backup, as a restore puts it back: the server stopped, its data directory copied, the
   * server started again. Returns the backup's name for `restore`.
   */
  async backup(): Promise<string> {
    const name = join(this.dir, `backup-${Date.now()}`);
    await this.exec('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'fast', '-w', 'stop']);
    await run(...this.shell(['cp', '-a', join(this.dir, 'data'), name]));
    await this.up();
    return name;
  }

  /** Restores a backup: the server stopped, its data directory replaced by the backup's, the server started. */
  async restore(backup: string): Promise<void> {
    await this.exec('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'fast', '-w', 'stop']);
    await run(...this.shell(['rm', '-rf', join(this.dir, 'data')]));
    await run(...this.shell(['cp', '-a', backup, join(this.dir, 'data')]));
    await this.up();
  }

  private shell(command: string[]): [string, string[], { timeout: number }] {
    const [cmd, ...rest] = [...this.asUser, ...command];
    return [cmd!, rest, { timeout: 60_000 }];
  }

  async stop(): Promise<void> {
    await this.exec('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'fast', 'stop']).catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }
}
