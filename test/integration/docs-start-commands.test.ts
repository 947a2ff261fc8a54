import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { codeBlocks, codeSpans, documents, lineOf } from '../support/docs.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { runProgram } from '../support/process.js';
import { freePort } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * Every `npm run start:<program>` command the docs show runs as written on a machine set up as the
 * README says (Node, RabbitMQ and PostgreSQL on their default local ports, nothing else in the
 * environment): started with only PATH and HOME, plus what the command itself sets (inline
 * `NAME=value`, or an `export` line above it in the same code block), it becomes ready. Its
 * PostgreSQL database is a fresh one, without tables, as on a new machine: the programs make none,
 * so the docs must show `npx webhooks migrate` before the command (in its code block, or in its
 * paragraph), and that runs first, as written.
 *
 * What the test changes, and only that: the broker URL (this run's), the topology prefix (its
 * own), a `postgres://` URL on 127.0.0.1:5432 becomes this file's database on the same server, and
 * the ports (PORT, METRICS_PORT, ADMIN_PORT) are free ones, so that the run shares nothing. Ready
 * is the program's /readyz answering 200 on METRICS_PORT. `npm start` is not run here: its demo
 * merchant holds the port of config/merchants.dev.json (test/integration/cli-log-dev.test.ts starts it on a copy naming a free one).
 */
interface DocCommand {
  where: string;
  script: string;
  env: Record<string, string>;
  /** The environment of a `npx webhooks migrate` written before it, if one is. */
  migrate?: Record<string, string>;
}

const SHARED_COPIES = ['docs/DESIGN.md', 'docs/webhook-service-spec.md'];
const ASSIGNMENT = /^([A-Z_][A-Z0-9_]*)=(\S*)$/;

function parseAssignments(words: string[]): Record<string, string> | undefined {
  const env: Record<string, string> = {};
  for (const word of words) {
    const m = ASSIGNMENT.exec(word);
    if (!m) return undefined;
    env[m[1]!] = m[2]!;
  }
  return env;
}

/** A command line: `NAME=value ... npm run start:<x>`; what a preceding `export` line set comes first. */
function parseCommand(line: string, exported: Record<string, string>, where: string, migrate?: Record<string, string>): DocCommand {
  const m = /^(.*?)\bnpm run (start:[a-z-]+)\s*$/.exec(line.trim());
  const assigned = m && parseAssignments(m[1]!.trim().split(/\s+/).filter((w) => w !== ''));
  if (!m || !assigned) throw new Error(`${where}: cannot read "${line}" as NAME=value ... npm run start:<program>`);
  return { where, script: m[2]!, env: { ...exported, ...assigned }, migrate };
}

/** `NAME=value ... npx webhooks migrate`: its environment, or undefined for any other line. */
function parseMigrate(line: string, exported: Record<string, string>): Record<string, string> | undefined {
  const m = /^(.*?)\bnpx webhooks migrate\s*$/.exec(line.trim());
  const assigned = m && parseAssignments(m[1]!.trim().split(/\s+/).filter((w) => w !== ''));
  return assigned ? { ...exported, ...assigned } : undefined;
}

function docCommands(): DocCommand[] {
  const commands: DocCommand[] = [];
  // DESIGN.md and the spec (shared copies, not edited here) list the scripts; they are no how-to.
  for (const { file, text } of documents().filter((d) => !SHARED_COPIES.includes(d.file))) {
    // In code blocks, line by line; an `export` line applies to the lines after it in its block.
    for (const block of codeBlocks(text)) {
      let exported: Record<string, string> = {};
      let migrate: Record<string, string> | undefined;
      let at = block.at;
      for (const raw of block.body.split('\n')) {
        const line = raw.replace(/\s+#.*$/, '');
        const where = `${file}:${lineOf(text, at)}`;
        at += raw.length + 1;
        const exports = /^export\s+(.*)$/.exec(line.trim());
        if (exports) exported = { ...exported, ...parseAssignments(exports[1]!.split(/\s+/)) };
        else if (/\bnpm run start:/.test(line)) commands.push(parseCommand(line, exported, where, migrate));
        else migrate = parseMigrate(line, exported) ?? migrate;
      }
    }
    // In prose, each code span on its own, after the migrate written earlier in its paragraph.
    const spans = codeSpans(text);
    for (const span of spans.filter((s) => /\bnpm run start:/.test(s.body))) {
      const paragraphStart = text.lastIndexOf('\n\n', span.at);
      const migrate = spans.filter((s) => s.at > paragraphStart && s.at < span.at).map((s) => parseMigrate(s.body, {})).findLast((env) => env !== undefined);
      commands.push(parseCommand(span.body, {}, `${file}:${lineOf(text, span.at)}`, migrate));
    }
  }
  return commands;
}

describe('the npm run start:* commands in the docs', () => {
  const prefix = uniquePrefix('docs-start');
  const commands = docCommands();
  let database: TestDatabase;
  const fresh: TestDatabase[] = [];

  beforeAll(async () => {
    database = await createTestDatabase('docs_start');
  });

  afterAll(async () => {
    const broker = await TestBroker.open();
    await broker.deleteTopology(prefix);
    await broker.close();
    await database.drop();
    for (const db of fresh) await db.drop();
  });

  it('are found, every one the guides write (resending.md runs the API alone)', () => {
    const written = documents()
      .filter((d) => !SHARED_COPIES.includes(d.file))
      .flatMap(({ file, text }) => [...text.matchAll(/\bnpm run (start:[a-z-]+)/g)].map((m) => `${file}:${lineOf(text, m.index)}: npm run ${m[1]}`));
    expect(commands.map((c) => `${c.where}: npm run ${c.script}`).sort()).toEqual(written.sort());
    expect(commands.map((c) => c.where)).toContainEqual(expect.stringMatching(/^docs\/resending\.md:/));
  });

  it.each(commands.map((c) => [`${c.where}: npm run ${c.script}`, c] as const))('%s starts and gets ready', async (_, command) => {
    const ports = { PORT: String(await freePort()), METRICS_PORT: String(await freePort()), ADMIN_PORT: String(await freePort()) };
    const base: Record<string, string> = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix };
    // The README's machine's PostgreSQL, here a database of this case's own on it, as new: no tables.
    const local = /^postgres(ql)?:\/\/[^/]*@?127\.0\.0\.1:5432\//;
    const own = Object.values({ ...command.env, ...command.migrate }).some((value) => local.test(value)) ? await createTestDatabase('docs_start_fresh', undefined, { migrated: false }) : undefined;
    if (own) fresh.push(own);
    const withOwn = (written: Record<string, string>) => {
      const env = { ...base };
      for (const [name, value] of Object.entries(written)) env[name] = name === 'DATABASE_URL' && local.test(value) ? own!.url : value;
      return env;
    };
    if (command.migrate) {
      const migrated = await runProgram('dist/apps/cli/main.js', { ...withOwn(command.migrate), TOPOLOGY_PREFIX: prefix, RABBITMQ_URL: brokerUrl() }, ['migrate']);
      expect({ code: migrated.code, stderr: migrated.stderr }).toEqual({ code: 0, stderr: '' });
    }
    const env = withOwn(command.env);
    Object.assign(env, ports, { TOPOLOGY_PREFIX: prefix, RABBITMQ_URL: brokerUrl() });
    if (!('ADMIN_PORT' in command.env)) delete env.ADMIN_PORT;

    let output = '';
    const child: ChildProcess = spawn('npm', ['run', command.script], { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    const exited = once(child, 'exit');
    try {
      await waitFor(
        `${command.where}: npm run ${command.script} ready`,
        async () => {
          if (child.exitCode !== null) throw new Error(`${command.where}: npm run ${command.script} exited with ${child.exitCode}:\n${output.slice(-3_000)}`);
          const answer = await fetch(`http://127.0.0.1:${ports.METRICS_PORT}/readyz`).catch(() => undefined);
          return answer?.status === 200;
        },
        60_000,
        200,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n${output.slice(-3_000)}`);
      });
    } finally {
      // The whole group npm started (npm, its shell, node), by the group's id.
      if (child.exitCode === null) process.kill(-child.pid!, 'SIGTERM');
      await exited;
    }
  }, 90_000);

  // A supervisor, an IDE's stop button or `kill <npm's pid>` signals npm alone. npm forwards the
  // signal to its script's shell; a shell that did not exec node died of it and left node running,
  // holding its ports (and in development mode the embedded database) with nobody to stop it.
  it('npm run start:dispatcher stops its program when only npm is sent SIGTERM', async () => {
    const metricsPort = String(await freePort());
    const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', RABBITMQ_URL: brokerUrl(), TOPOLOGY_PREFIX: prefix, WEBHOOKS_DEV: 'true', DATABASE_URL: database.url, METRICS_PORT: metricsPort };
    let output = '';
    const child: ChildProcess = spawn('npm', ['run', 'start:dispatcher'], { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    const readyz = () => fetch(`http://127.0.0.1:${metricsPort}/readyz`).then((r) => r.status, () => undefined);
    try {
      await waitFor('npm run start:dispatcher ready', async () => (await readyz()) === 200, 60_000, 200).catch((err: Error) => {
        throw new Error(`${err.message}\n${output.slice(-3_000)}`);
      });
      process.kill(child.pid!, 'SIGTERM');
      await waitFor('the dispatcher stopped with npm (its port closed)', async () => (await readyz()) === undefined, 30_000, 200);
      expect(output).toContain('"signal":"SIGTERM"');
    } finally {
      // Whatever is left of the group npm started (an orphaned node included), by the group's id.
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // The group is gone already.
      }
    }
  }, 120_000);
});
