import { CircuitRows } from '../../apps/dispatcher/circuit-rows.js';
import { EndpointGuards } from '../../apps/dispatcher/stages/endpoint-guards.js';
import { HEADERS } from '../../libs/contracts/index.js';
import { type Database, openPostgres } from '../../libs/delivery-store/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { WaitStore } from '../../libs/waits/index.js';
import { FrozenProxy } from '../support/frozen-proxy.js';
import { createTestDatabase } from '../support/postgres.js';
import { PrivatePostgres } from '../support/private-postgres.js';
import { once, waitFor } from '../support/wait.js';

const CIRCUIT = { merchantId: 'm_restart', endpointId: 'ep_restart' };
const KEY = 'm_restart\u001fhttps://restart.example/hook';

/** Two dispatchers' breakers, each following the rows on a LISTEN of its own, as the program wires them. */
function dispatcherBreakers(db: Database): { guards: EndpointGuards; rows: CircuitRows } {
  const guards = new EndpointGuards({ maxInFlight: 4, failureThreshold: 5, cooldownMs: 30_000, maxCooldownMs: 600_000 });
  const rows = new CircuitRows(db, new WaitStore(db), (m, e) => (m === CIRCUIT.merchantId && e === CIRCUIT.endpointId ? KEY : undefined), guards, silentLogger());
  rows.start();
  return { guards, rows };
}

/** A parked wait whose attempt's failure opens the circuit (its probe an hour away). */
function opening(webhookId: string) {
  return { ...CIRCUIT, webhookId, hand: 0, attempt: 1, delayMs: 0, reason: 'retry' as const, headers: { [HEADERS.webhookId]: webhookId }, content: Buffer.from('{}'), spanLeftMs: 86_400_000, circuitMs: 3_600_000 };
}

/**
 * PostgreSQL restarted (or crashed) under an open circuit's row: every dispatcher's breaker ends up
 * as the row says, whatever it heard before (its LISTEN lost, listened on again, the open rows read
 * again), and the row's parked waits are neither lost nor left parked once it closes.
 */
describe("PostgreSQL restarted under a circuit's row, with two dispatchers' breakers following it", () => {
  it('has both breakers follow the row after a restart and after a crash while a close commits; no wait lost or left parked', async () => {
    const server = await PrivatePostgres.start();
    if (!server) throw new Error(`no PostgreSQL binaries to start a server of the test's own (PG_BIN_DIR)`);
    const dbs = [openPostgres(server.url, { maxConnections: 2 }), openPostgres(server.url, { maxConnections: 2 })];
    const store = new WaitStore(dbs[0]!);
    const dispatchers = dbs.map(dispatcherBreakers);
    const open = () => dispatchers.map((d) => d.guards.openUntil(KEY) > 0);
    const row = async () => (await once('the row read', () => store.openCircuits())).length > 0;
    try {
      await store.write([opening('evt_1')], []);
      await waitFor('both breakers open', () => open().every(Boolean), 10_000);

      // Restarted: the close is made once it answers, perhaps before the listeners are back.
      await server.restart();
      await once('the close written', () => store.closeCircuits([CIRCUIT]));
      await waitFor('both breakers closed with the row', () => open().every((o) => !o), 15_000);

      // Opened again, then crashed while a close commits: the breakers end as the row does, whichever it is.
      await once('the row opened again', () => store.write([opening('evt_2')], []));
      await waitFor('both breakers open again', () => open().every(Boolean), 15_000);
      const closing = store.closeCircuits([CIRCUIT]).catch(() => 'lost');
      await server.crash();
      await closing;
      await server.up();
      const isOpen = await row();
      await waitFor(`both breakers as the row (${isOpen ? 'open' : 'closed'})`, () => open().every((o) => o === isOpen), 15_000);

      // Closed (again, if the crash lost it): every parked wait is made due, none lost, the row gone.
      if (isOpen) await once('the close written', () => store.closeCircuits([CIRCUIT]));
      await waitFor('both breakers closed', () => open().every((o) => !o), 15_000);
      while (await once('an unpark', () => store.unparkClosed(500)));
      const waits = await once('the waits read', () => store.list({ merchantId: CIRCUIT.merchantId, limit: 10 }));
      expect(waits.map((w) => [w.webhook_id, w.parked])).toEqual([['evt_1', false], ['evt_2', false]]);
      expect(await row()).toBe(false);
    } finally {
      for (const d of dispatchers) await d.rows.stop();
      for (const db of dbs) await db.close();
      await server.stop();
    }
  }, 120_000);
});

/**
 * Its LISTEN connection's server gone without a reset (a partition, a failover to another host):
 * the connection only listens, so nothing it sends fails, and the socket's keepalive takes hours
 * (the OS's default). Seen failing with a LISTEN nobody asked after: the breaker stayed open 30 s
 * after its row closed, and would have until TCP gave up. Now asked after every statement timeout.
 */
describe("a breaker whose LISTEN connection's server stops answering without a reset", () => {
  it('notices within a few heartbeats, listens again, and follows the row it missed', async () => {
    const database = await createTestDatabase('circuit_rows_partition');
    const proxy = await FrozenProxy.start(database.url);
    const direct = openPostgres(database.url, { maxConnections: 2 });
    // Its statement timeout, 1 s: its listening connection is asked after every second.
    const viaProxy = openPostgres(proxy.url, { maxConnections: 2, connectTimeoutMs: 1_000, statementTimeoutMs: 1_000 });
    const store = new WaitStore(direct);
    const dispatcher = dispatcherBreakers(viaProxy);
    try {
      await store.write([opening('evt_1')], []);
      await waitFor('its breaker open', () => dispatcher.guards.openUntil(KEY) > 0, 10_000);
      // Nothing passes any more on its connections, which stay open; a new one goes straight to the server.
      proxy.freezeOpen();
      await store.closeCircuits([CIRCUIT]);
      await waitFor('its breaker closed with the row', () => dispatcher.guards.openUntil(KEY) === 0, 30_000);
    } finally {
      await dispatcher.rows.stop();
      await proxy.close();
      await viaProxy.close().catch(() => {});
      await direct.close();
      await database.drop();
    }
  }, 60_000);
});
