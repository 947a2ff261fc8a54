import type { ChildProcess } from 'node:child_process';
import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { declareIntake } from '../../libs/topology/index.js';
import { brokerUrl, deleteTopologyOf } from './broker.js';
import type { PrivatePostgres } from './private-postgres.js';

/**
 * A connection to publish on as upstream does (named `test-${name}`), with `prefix`'s intake
 * declared: what upstream publishes to exists before the dispatchers (programs, started later) do.
 */
export async function openUpstream(prefix: string, name: string): Promise<BrokerConnection> {
  const broker = new BrokerConnection({ url: brokerUrl(), name: `test-${name}`, logger: silentLogger() });
  await broker.open(10_000);
  const channel = await broker.createChannel();
  await declareIntake(channel, prefix);
  await channel.close();
  return broker;
}

/**
 * The end of a test that ran dispatchers as programs (startProgram) on a PostgreSQL server of its
 * own: the programs still running stopped (SIGTERM) and waited for, what the test opened closed in
 * its order, `prefix`'s topology deleted, then the server stopped.
 */
export async function endSpawnedDispatchers(
  prefix: string,
  programs: ReadonlyArray<{ child: ChildProcess; finished: Promise<unknown> }>,
  opened: ReadonlyArray<{ close(): Promise<unknown> } | undefined>,
  server: PrivatePostgres | undefined,
): Promise<void> {
  for (const p of programs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGTERM');
  await Promise.all(programs.map((p) => p.finished));
  for (const open of opened) await open?.close();
  await deleteTopologyOf(prefix);
  await server?.stop();
}
