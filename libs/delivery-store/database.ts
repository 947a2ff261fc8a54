import { mkdirSync } from 'node:fs';
import pg from 'pg';

/** What every query needs: pg's Pool and Client and PGlite all answer `query(text, params)` with `{rows}`. */
export interface Queryable {
  query<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<{ rows: R[] }>;
}

/**
 * One connection kept for a long job: the recorder's advisory lock lives as long as it does, and
 * its writes run on it. `lost` settles when the connection ends under it.
 */
export interface Session extends Queryable {
  transaction<T>(work: (tx: Queryable) => Promise<T>): Promise<T>;
  readonly lost: Promise<Error>;
  close(): Promise<void>;
}

export interface Database extends Queryable {
  session(): Promise<Session>;
  close(): Promise<void>;
  /** 'postgres' or 'pglite': for logs and /readyz. */
  readonly kind: 'postgres' | 'pglite';
}

export interface PostgresOptions {
  /** A query waiting this long for a connection fails: the API answers 503 instead of hanging. */
  connectTimeoutMs?: number;
  statementTimeoutMs?: number;
  maxConnections?: number;
  /** Names the connections in pg_stat_activity, so that an operator sees whose they are. */
  applicationName?: string;
}

export function openPostgres(url: string, options: PostgresOptions = {}): Database {
  const settings = {
    connectionString: url,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 2_000,
    statement_timeout: options.statementTimeoutMs ?? 30_000,
    application_name: options.applicationName,
    keepAlive: true,
  };
  const pool = new pg.Pool({ ...settings, max: options.maxConnections ?? 5 });
  // An idle connection dropped by a restarting server must not end the process.
  pool.on('error', () => {});
  return {
    kind: 'postgres',
    query: (text, params) => pool.query(text, params as unknown[]) as never,
    async session() {
      const client = new pg.Client(settings);
      let markLost!: (err: Error) => void;
      const lost = new Promise<Error>((resolve) => (markLost = resolve));
      client.on('error', (err) => markLost(err));
      client.on('end', () => markLost(new Error('connection ended')));
      await client.connect();
      return {
        lost,
        query: (text, params) => client.query(text, params as unknown[]) as never,
        async transaction(work) {
          await client.query('BEGIN');
          try {
            const result = await work({ query: (text, params) => client.query(text, params as unknown[]) as never });
            await client.query('COMMIT');
            return result;
          } catch (err) {
            await client.query('ROLLBACK').catch(() => {});
            throw err;
          }
        },
        close: () => client.end().catch(() => {}),
      };
    },
    close: () => pool.end(),
  };
}

/**
 * Development mode without DATABASE_URL: PostgreSQL compiled to WebAssembly, in a local folder.
 * One process owns it, so the recorder and the API share this instance (npm start runs both).
 */
export async function openPglite(dir: string): Promise<Database> {
  mkdirSync(dir, { recursive: true });
  const { PGlite } = await import('@electric-sql/pglite');
  const db = await PGlite.create(dir);
  const queryable: Queryable = { query: (text, params) => db.query(text, params) as never };
  return {
    kind: 'pglite',
    query: queryable.query,
    async session() {
      return {
        lost: new Promise<Error>(() => {}),
        query: queryable.query,
        transaction: (work) => db.transaction((tx) => work({ query: (text, params) => tx.query(text, params) as never })),
        close: async () => {},
      };
    },
    close: () => db.close(),
  };
}
