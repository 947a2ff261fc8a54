import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import amqp from 'amqplib';
import { topologyNames } from '../../libs/topology/index.js';

const run = promisify(execFile);
const SCRIPT = 'test/cluster/cluster.sh';

/** The nodes test/cluster/cluster.sh runs: it is the one place that defines them. */
export const NODES = [1, 2, 3].map((i) => ({ index: i, name: `webhooks-c${i}@localhost` }));

export type ClusterNode = (typeof NODES)[number];

export function nodeByName(name: string): ClusterNode {
  const node = NODES.find((n) => n.name === name);
  if (!node) throw new Error(`no cluster node ${name}`);
  return node;
}

/** kill -9 of the node's Erlang VM: no goodbye to clients or peers. */
export async function killNode(node: ClusterNode): Promise<void> {
  await run(SCRIPT, ['kill-node', String(node.index)], { timeout: 30_000 });
}

/** Starts a killed node again; its data directory makes it rejoin the cluster. */
export async function startNode(node: ClusterNode): Promise<void> {
  await run(SCRIPT, ['start-node', String(node.index)], { timeout: 180_000 });
}

async function listQueues<T>(columns: string[]): Promise<T[]> {
  for (const node of NODES) {
    try {
      const { stdout } = await run('rabbitmqctl', ['-n', node.name, 'list_queues', ...columns, '--formatter', 'json', '--quiet'], { timeout: 20_000 });
      return JSON.parse(stdout) as T[];
    } catch {
      // that node is down: ask the next
    }
  }
  throw new Error('no cluster node answered list_queues');
}

/** Which node leads each queue, as the cluster reports it. */
export async function leaders(): Promise<Map<string, string>> {
  const rows = await listQueues<{ name: string; leader: string }>(['name', 'leader']);
  return new Map(rows.map((row) => [row.name, row.leader]));
}

/** Members of a queue that are online. */
export async function onlineMembers(queue: string): Promise<string[]> {
  const rows = await listQueues<{ name: string; online: string[] }>(['name', 'online']);
  return rows.find((row) => row.name === queue)?.online ?? [];
}

/** A plain connection to whichever node answers first. */
export async function connectAny(urls: string[]): Promise<amqp.ChannelModel> {
  let last: unknown;
  for (const url of urls) {
    try {
      const connection = await amqp.connect(url);
      connection.on('error', () => {});
      return connection;
    } catch (err) {
      last = err;
    }
  }
  throw last;
}

/** Brings back the nodes a test killed, then deletes what a test file declared under its prefix. */
export async function cleanUp(urls: string[], killed: string[], prefix: string): Promise<void> {
  for (const name of killed.splice(0)) await startNode(nodeByName(name)).catch(() => {});
  const names = topologyNames(prefix);
  const connection = await connectAny(urls);
  for (const queue of [names.dispatch, names.failed, names.invalid]) {
    const ch = await connection.createChannel();
    ch.on('error', () => {});
    await ch.deleteQueue(queue).catch(() => {});
    await ch.close().catch(() => {});
  }
  await connection.close();
}

/**
 * The node a client connection is on, found by the start of its connection name: the broker
 * reports the port the client connected to, and `urls` (in node order) says whose port it is.
 */
export async function nodeHoldingConnection(namePrefix: string, urls: string[]): Promise<ClusterNode | undefined> {
  for (const node of NODES) {
    try {
      const { stdout } = await run('rabbitmqctl', ['-n', node.name, 'list_connections', 'client_properties', 'port', '--formatter', 'json', '--quiet'], { timeout: 20_000 });
      const rows = JSON.parse(stdout) as Array<{ client_properties: Array<[string, string, unknown]>; port: number }>;
      const row = rows.find((r) => r.client_properties.some(([key, , value]) => key === 'connection_name' && String(value).startsWith(namePrefix)));
      if (!row) return undefined;
      const index = urls.findIndex((url) => Number(new URL(url).port) === row.port);
      return index >= 0 ? NODES[index] : undefined;
    } catch {
      // that node is down: ask the next
    }
  }
  return undefined;
}
