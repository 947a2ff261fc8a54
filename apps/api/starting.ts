import type { IncomingMessage, ServerResponse } from 'node:http';
import type { SchemaWaitState } from '../../libs/migrations/index.js';
import { errorBody, unavailable } from './errors.js';

/** What the API's start-up waits for now, for /readyz. */
export class StartupProgress {
  what = 'PostgreSQL';
  detail?: string;
  database = false;
  broker = false;

  waitFor(what: string, detail?: string): void {
    this.what = what;
    this.detail = detail;
  }

  schema(state: SchemaWaitState): void {
    this.database = state.waiting !== 'database';
    if (state.waiting) this.waitFor(state.waiting === 'schema' ? 'the database schema' : 'PostgreSQL', state.detail);
    else this.waitFor('the merchant database');
  }
}

/** PORT's answers while the API starts: /healthz 200, so that a liveness probe does not kill a program that only waits. */
export function startingHandler(progress: StartupProgress): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const path = (req.url ?? '').split('?')[0];
    const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
      void res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers }).end(JSON.stringify(body));
    if (req.method === 'GET' && path === '/healthz') return json(200, { status: 'ok' });
    if (req.method === 'GET' && path === '/readyz') return json(503, {
        status: 'not ready',
        broker: progress.broker ? 'connected' : 'disconnected',
        database: progress.database ? 'reachable' : 'unreachable',
        waitingFor: progress.what,
        detail: progress.detail,
      });
    const error = unavailable('The service is starting; try again shortly');
    json(error.status, errorBody(error), error.headers);
  };
}
