import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BrokerConnection } from '../../libs/broker/index.js';
import { silentLogger } from '../../libs/logger/index.js';
import { declareTopology, deliveriesSpec, declareQueueSpec, topologySpec } from '../../libs/topology/index.js';
import { cleanUp, NODES } from './cluster.js';

const run = promisify(execFile);
const urls = (process.env.CLUSTER_URLS ?? '').split(',');
const prefix = `cluster.grow.${randomBytes(3).toString('hex')}`;

/**
 * docs/cluster.md, "Growing to three nodes": a topology created with one member per queue and
 * stream (as on a single node that later became a cluster) has, after the guide's recipe is run for
 * each other node, every quorum queue and every stream on all three nodes.
 */
describe("cluster.md's recipe for growing to three nodes", () => {
  let broker: BrokerConnection;

  beforeAll(async () => {
    // Through node 1 alone: a queue's one member is then there (client-local placement), as on the
    // node a deployment started on, and the recipe grows it to the other two.
    broker = new BrokerConnection({
      url: urls[0]!,
      name: 'test-cluster-grow',
      logger: silentLogger(),
      declare: async (open) => {
        const replication = { quorumGroupSize: 1, streamClusterSize: 1 };
        await declareTopology(open, { prefix, failedRetention: '1D', replication });
        await declareQueueSpec(open, deliveriesSpec(prefix, replication));
      },
    });
    await broker.open(60_000);
  });

  afterAll(async () => {
    // What cleanUp does not delete: the deliveries stream.
    const channel = broker && (await broker.createChannel().catch(() => undefined));
    await channel?.deleteQueue(`${prefix}.deliveries`).catch(() => {});
    await channel?.close().catch(() => {});
    await broker?.close();
    await cleanUp(urls, [], prefix);
  });

  const members = async () => {
    const { stdout } = await run('rabbitmqctl', ['-n', NODES[0]!.name, 'list_queues', 'name', 'type', 'members', '--formatter', 'json', '--quiet'], { timeout: 30_000 });
    return new Map((JSON.parse(stdout) as Array<{ name: string; members: string[] }>).filter((q) => q.name.startsWith(`${prefix}.`)).map((q) => [q.name, [...q.members].sort()]));
  };

  it('gives every quorum queue and stream a member on each node', async () => {
    const spec = topologySpec({ prefix, failedRetention: '1D', deliveriesStream: true });
    const all = spec.queues.map((q) => q.name).sort();
    const before = await members();
    expect([...before.keys()].sort()).toEqual(all);
    expect([...before.values()].every((m) => m.join() === NODES[0]!.name)).toBe(true);

    // rabbitmq-streams as the guide says to install it on Debian's 3.10 package: linked to the tools' wrapper.
    const tools = mkdtempSync(join(tmpdir(), 'grow-tools-'));
    if (!existsSync('/usr/sbin/rabbitmq-streams')) symlinkSync('/usr/lib/rabbitmq/bin/rabbitmq-script-wrapper', join(tools, 'rabbitmq-streams'));
    const markdown = readFileSync('docs/cluster.md', 'utf8');
    const recipe = /## Growing to three nodes[\s\S]*?```sh\n([\s\S]*?)```/.exec(markdown)?.[1];
    expect(recipe).toBeDefined();
    // The recipe names its node, vhost and prefix in its first lines; each tool is told which node to ask.
    const body = recipe!.replace(/^(NODE|VHOST|PREFIX)=.*$/gm, '');
    for (const node of NODES.slice(1)) {
      const script = [
        'set -euo pipefail',
        `NODE=${node.name}`,
        'VHOST=/',
        `PREFIX=${prefix}`,
        `rabbitmq-queues() { command rabbitmq-queues -n ${NODES[0]!.name} "$@"; }`,
        `rabbitmq-streams() { command rabbitmq-streams -n ${NODES[0]!.name} "$@"; }`,
        body,
      ].join('\n');
      await run('bash', ['-c', script], { timeout: 120_000, env: { ...process.env, PATH: `${tools}:${process.env.PATH}` } });
    }

    const nodes = NODES.map((n) => n.name).sort();
    const after = await members();
    expect(Object.fromEntries([...after].filter(([, m]) => m.join() !== nodes.join()))).toEqual({});
  });
});
