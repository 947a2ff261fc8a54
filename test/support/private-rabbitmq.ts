import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './receiver.js';
import { waitFor } from './wait.js';

const run = promisify(execFile);
const find = (name: string) => [`/usr/sbin/${name}`, `/usr/lib/rabbitmq/bin/${name}`, `/usr/local/sbin/${name}`].find(existsSync);
const SERVER = find('rabbitmq-server');
const CTL = find('rabbitmqctl');

/**
 * A RabbitMQ node of a test file's own, from the machine's rabbitmq-server (as test/cluster does):
 * its own node name, AMQP and distribution ports, data and logs in a temporary folder. A file that
 * blocks (a memory alarm) or stops its broker does it to this one, not to the shared broker on 5672
 * that the files running beside it use: it need not run alone. Needs root (rabbitmq-server switches
 * to the rabbitmq user), as the cluster tests do.
 */
export class PrivateRabbitMQ {
  private constructor(
    private readonly dir: string,
    readonly port: number,
    readonly node: string,
  ) {}

  /** Whether one can be started here: the Debian rabbitmq-server installed, and root. */
  static available(): boolean {
    return SERVER !== undefined && CTL !== undefined && process.getuid?.() === 0;
  }

  static async start(): Promise<PrivateRabbitMQ> {
    if (!PrivateRabbitMQ.available()) throw new Error('a private RabbitMQ node needs rabbitmq-server and root');
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'private-rabbitmq-'));
    mkdirSync(join(dir, 'mnesia'));
    mkdirSync(join(dir, 'log'));
    writeFileSync(join(dir, 'rabbitmq.conf'), `listeners.tcp.local = 127.0.0.1:${port}\n`);
    // No plugins: a management listener would clash with the shared broker's.
    writeFileSync(join(dir, 'enabled_plugins'), '[].\n');
    await run('chown', ['-R', 'rabbitmq:rabbitmq', dir]);
    const broker = new PrivateRabbitMQ(dir, port, `webhooks-p${port}@localhost`);
    const pid = join(dir, 'pid');
    await run(SERVER!, ['-detached'], {
      timeout: 60_000,
      env: {
        ...process.env,
        RABBITMQ_NODENAME: broker.node,
        RABBITMQ_NODE_PORT: String(port),
        RABBITMQ_DIST_PORT: String(await freePort()),
        RABBITMQ_MNESIA_BASE: join(dir, 'mnesia'),
        RABBITMQ_LOG_BASE: join(dir, 'log'),
        RABBITMQ_CONFIG_FILE: join(dir, 'rabbitmq.conf'),
        RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
        RABBITMQ_PID_FILE: pid,
      },
    });
    try {
      await waitFor('the private node wrote its pid file', () => existsSync(pid) && readFileSync(pid, 'utf8').trim() !== '', 120_000, 250);
      // `wait` follows the pid file until the node has booted.
      await broker.ctl(['wait', pid, '--timeout', '120']);
    } catch (err) {
      await broker.stop();
      throw err;
    }
    return broker;
  }

  /** guest may log in over loopback, as on the shared broker. */
  get url(): string {
    return `amqp://guest:guest@127.0.0.1:${this.port}`;
  }

  /** rabbitmqctl on this node. */
  ctl(args: string[]): Promise<{ stdout: string }> {
    return run(CTL!, ['-n', this.node, ...args], { timeout: 120_000 });
  }

  /** Publishers blocked (a memory alarm: the high watermark below what the node uses), or unblocked (`watermark` back). */
  async setMemoryHighWatermark(watermark: string): Promise<void> {
    await this.ctl(['set_vm_memory_high_watermark', watermark]);
  }

  /** The RabbitMQ application stopped (every connection closed, the Erlang node up), or started again and booted. */
  async stopApp(): Promise<void> {
    await this.ctl(['stop_app']);
  }

  async startApp(): Promise<void> {
    await this.ctl(['start_app']);
    await this.ctl(['await_startup']);
  }

  /** The node killed and its folder removed. */
  async stop(): Promise<void> {
    const pid = Number(existsSync(join(this.dir, 'pid')) ? readFileSync(join(this.dir, 'pid'), 'utf8').trim() : NaN);
    if (Number.isInteger(pid) && pid > 0) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
