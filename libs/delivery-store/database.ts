import { mkdirSync } from 'node:fs';
import pg from 'pg';
import { lockFolder } from './folder-lock.js';
import { Periodic } from '../runtime/periodic.js';
import { within } from '../runtime/timers.js';

/** pg's Pool and Client and PGlite all answer `query(text, params)` with `{rows}`. */
export interface Queryable {
  query<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<{ rows: R[] }>;
}

/** One connection kept for a long job (the recorder's advisory lock lives as long as it does); `lost` settles when it ends. */
export interface Session extends Queryable {
  /** Holds the session while `work` runs: a statement sent on the session meanwhile waits for its end (never `session.query` inside `work`: use `tx`). */
  transaction<T>(work: (tx: Queryable) => Promise<T>): Promise<T>;
  /** A script of several statements, no parameters (a migration file). */
  exec(sql: string): Promise<void>;
  readonly lost: Promise<Error>;
  close(): Promise<void>;
}

/**
 * A LISTEN on its own connection: `lost` settles when that connection ends, or stops answering
 * (asked every statement timeout: a connection that only listens would not notice a server gone without a reset).
 */
export type Listener = Pick<Session, 'query' | 'lost' | 'close'>;

export interface Database extends Queryable {
  session(): Promise<Session>;
  /** One transaction on one pooled connection: committed when `work` resolves, rolled back when it throws. */
  transaction<T>(work: (tx: Queryable) => Promise<T>): Promise<T>;
  /** Calls `onPayload` for each NOTIFY on `channel`, delivered on commit, while the listener lives. */
  listen(channel: string, onPayload: (payload: string) => void): Promise<Listener>;
  close(): Promise<void>;
  readonly kind: 'postgres' | 'pglite';
}

export interface PostgresOptions {
  /** A query waiting this long for a connection fails (503) instead of hanging. */
  connectTimeoutMs?: number;
  /** 0: none, whatever the role or the database sets (pg sends no statement_timeout of 0 itself). */
  statementTimeoutMs?: number;
  maxConnections?: number;
  applicationName?: string;
}

export function openPostgres(url: string, options: PostgresOptions = {}): Database {
  const settings = {
    connectionString: url,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 2_000,
    statement_timeout: options.statementTimeoutMs ?? 30_000,
    application_name: options.applicationName,
    keepAlive: true,
    // No JIT: every statement here is short, and a GIN estimate could compile a 0.2 ms claim for longer.
    // The server's keepalives end the session of a host that vanished within a minute, not two hours,
    // and the locks it held (the recorder's lead) go with it. A DATABASE_URL with its own `options` keeps them.
    // statement_timeout=0 said here too: pg leaves a 0 out of the startup packet, and a role's applied.
    // synchronous_commit on, whatever the server's or role's default: what is acked or answered on a commit
    // (a wait, a rotated secret, an Idempotency-Key, a resend's mark) must survive a crash. The recorder's session alone turns it off.
    options: `-c jit=off -c synchronous_commit=on${options.statementTimeoutMs === 0 ? ' -c statement_timeout=0' : ''} -c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3`,
  };
  // A reply that never comes (the host gone without a reset) fails at twice the statement timeout, not TCP's 15 min.
  const statementTimeout = settings.statement_timeout;
  const pool = new pg.Pool({ ...settings, query_timeout: statementTimeout > 0 ? 2 * statementTimeout : undefined, max: options.maxConnections ?? 5 });
  // An idle connection dropped by a restarting server must not end the process.
  pool.on('error', () => {});
  return {
    kind: 'postgres',
    query: (text, params) => pool.query(text, params as unknown[]) as never,
    async session() {
      const { client, lost } = await connect(settings);
      // One caller at a time, a transaction for its whole length: else pg sends another caller's
      // statement inside it, and that transaction's rollback undoes it.
      let turn: Promise<unknown> = Promise.resolve();
      const alone = <T>(work: () => Promise<T>): Promise<T> => {
        const run = turn.then(work);
        turn = run.catch(() => {});
        return run;
      };
      return {
        lost,
        query: (text, params) => alone(() => client.query(text, params as unknown[])) as never,
        // Without parameters pg sends the simple query protocol, which takes several statements.
        exec: (sql) => alone(async () => void (await client.query(sql))),
        transaction: (work) => alone(() => inTransaction(client, work)),
        close: () => client.end().catch(() => {}),
      };
    },
    async transaction(work) {
      const client = await pool.connect();
      let broken: Error | undefined;
      // Checked out, a client has no listener of the pool's: an 'error' nobody hears ends the process.
      const lost = (err: Error) => (broken = err);
      client.on('error', lost);
      try {
        return await inTransaction(client, work);
      } catch (err) {
        // A connection that failed mid-transaction goes, not back to the pool.
        if (!(err as { code?: string })?.code) broken = err as Error;
        throw err;
      } finally {
        client.off('error', lost);
        client.release(broken);
      }
    },
    async listen(channel, onPayload) {
      const { client, lost, markLost } = await connect(settings);
      client.on('notification', (message) => {
        if (message.channel === channel) onPayload(message.payload ?? '');
      });
      const beat = statementTimeout > 0 ? statementTimeout : 10_000;
      try {
        await within(beat, client.query(`LISTEN ${pg.escapeIdentifier(channel)}`), 'reject');
      } catch (err) {
        // Closed: each try of a standby refusing LISTEN (25006, a failover) or of a server gone quiet would keep one.
        void client.end().catch(() => {});
        throw err;
      }
      const heartbeat: Periodic = new Periodic(async () => {
        if ((await within(beat, client.query('SELECT 1').then(() => true, () => true))) !== undefined) return;
        markLost(new Error(`the listening connection did not answer within ${beat} ms`));
        // Not waited for: a connection whose server is gone may take TCP's time to end.
        void client.end().catch(() => {});
      }, () => beat, { waitFirst: true });
      void lost.then(() => heartbeat.stop());
      void heartbeat.start();
      const close = () => (void heartbeat.stop(), client.end().catch(() => {}));
      return { lost, query: (text, params) => client.query(text, params as unknown[]) as never, close };
    },
    close: () => pool.end(),
  };
}

/** A client of its own (not from the pool), whose `lost` settles when it errs or ends. */
async function connect(settings: pg.ClientConfig): Promise<{ client: pg.Client; lost: Promise<Error>; markLost: (err: Error) => void }> {
  const client = new pg.Client(settings);
  let markLost!: (err: Error) => void;
  const lost = new Promise<Error>((resolve) => (markLost = resolve));
  client.on('error', (err) => markLost(err));
  client.on('end', () => markLost(new Error('connection ended')));
  await client.connect().catch(async (err: unknown) => {
    await client.end().catch(() => {});
    throw err;
  });
  return { client, lost, markLost };
}

async function inTransaction<T>(client: pg.ClientBase, work: (tx: Queryable) => Promise<T>): Promise<T> {
  await client.query('BEGIN');
  try {
    const result = await work({ query: (text, params) => client.query(text, params as unknown[]) as never });
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

/** Development mode without DATABASE_URL: PostgreSQL in WebAssembly, in a local folder, owned by one process. */
export async function openPglite(dir: string): Promise<Database> {
  mkdirSync(dir, { recursive: true });
  // Before PGlite touches the folder: a second opener would already write it.
  const release = lockFolder(dir);
  const db = await import('@electric-sql/pglite')
    .then(({ PGlite }) => PGlite.create(dir))
    .catch((err: unknown) => {
      release();
      throw err;
    });
  const queryable: Queryable = { query: (text, params) => db.query(text, params) as never };
  const transaction = <T>(work: (tx: Queryable) => Promise<T>) => db.transaction((tx) => work({ query: (text, params) => tx.query(text, params) as never }));
  const never = new Promise<Error>(() => {});
  return {
    kind: 'pglite',
    query: queryable.query,
    async session() {
      return { lost: never, query: queryable.query, exec: async (sql) => void (await db.exec(sql)), transaction, close: async () => {} };
    },
    transaction,
    async listen(channel, onPayload) {
      const unlisten = await db.listen(channel, onPayload);
      return { lost: never, query: queryable.query, close: () => unlisten() };
    },
    close: () => db.close().finally(release),
  };
}
