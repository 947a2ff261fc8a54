import { execFile } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { migrateDatabase } from './postgres.js';
import { freePort } from './receiver.js';

const run = promisify(execFile);
const BIN = process.env.PG_BIN_DIR ?? '/usr/lib/postgresql/15/bin';

/**
 * A PostgreSQL server of a test's own, in a temporary folder, that the test may crash
 * (`pg_ctl stop -m immediate`) without touching the machine's server that other tests use. Its
 * WAL writer waits 10 s between flushes, so that asynchronous commits are still in memory when it
 * is crashed, as after a power cut or a failover to an asynchronous replica.
 */
export class PrivatePostgres {
  private constructor(
    private readonly dir: string,
    readonly port: number,
    private readonly asUser: string[],
  ) {}

  /** undefined where initdb is not installed (PG_BIN_DIR), or cannot run here. */
  static async start(): Promise<PrivatePostgres | undefined> {
    if (!existsSync(join(BIN, 'initdb'))) return undefined;
    const root = process.getuid?.() === 0;
    const asUser = root ? ['runuser', '-u', 'postgres', '--'] : [];
    const dir = mkdtempSync(join(tmpdir(), 'private-pg-'));
    if (root) {
      // Root cannot run a PostgreSQL server: the Debian package's postgres user does.
      const ids = await Promise.all(['-u', '-g'].map(async (flag) => Number((await run('id', [flag, 'postgres'])).stdout.trim())));
      chmodSync(dir, 0o700);
      chownSync(dir, ids[0]!, ids[1]!);
    }
    const pg = new PrivatePostgres(dir, await freePort(), asUser);
    await pg.exec('initdb', ['-D', join(dir, 'data'), '-A', 'trust', '-U', 'postgres', '--no-sync']);
    await pg.up();
    // Its `postgres` database, as `webhooks migrate` leaves it before the programs start.
    await migrateDatabase(pg.url);
    return pg;
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

  /** A clean stop (`pg_ctl stop -m fast`): every connection closed, the server down until `up()`. */
  async down(): Promise<void> {
    await this.exec('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'fast', '-w', 'stop']);
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

  /** Started again as a hot standby with no primary (standby.signal): reads answered, writes and LISTEN refused (25006), as during a failover. */
  async standby(): Promise<void> {
    await this.down();
    await run(...this.shell(['touch', join(this.dir, 'data', 'standby.signal')]));
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
