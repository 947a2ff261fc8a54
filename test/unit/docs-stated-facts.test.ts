import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PORTAL_SCRIPT_GZIP_BUDGET, portalScriptWeight } from '../../apps/api/portal/page.js';
import { referenceSchema, ROUTES } from '../../apps/api/routes.js';
import { EndpointGuards } from '../../apps/dispatcher/stages/endpoint-guards.js';
import { endpointOf } from '../../apps/dispatcher/stages/endpoint-key.js';
import { REMEMBERED_ENDPOINTS } from '../../apps/dispatcher/stages/throttle.js';
import { isWellFormedReference } from '../../libs/contracts/index.js';
import { SWEEP_AFTER_MS } from '../../libs/merchants/erase.js';
import { SchemaTooNewError } from '../../libs/migrations/errors.js';
import { DECLARATION_SYNTAX } from '../../libs/migrations/files.js';
import { CHANGES_CHANNEL } from '../../libs/merchants/rows.js';
import { CIRCUIT_CHANNEL, WAIT_TAKE_LIMIT } from '../../libs/waits/index.js';
import { documents, lineOf } from '../support/docs.js';

/**
 * Facts the guides state that a change elsewhere would leave stale: the tables the migrations
 * make (production.md's "What lives where", which backups and a merchant's delete rely on), and the
 * portal script's weight and the budget its test holds it to (portal.md, DESIGN.md), and the log
 * lines and messages an operator is told to look for (a reworded one would leave them searching).
 */

const SQL = 'libs/migrations/sql';

/** The tables the migrations leave (made, not dropped since), and those they dropped. */
function migratedTables(): { kept: Set<string>; dropped: Set<string> } {
  const kept = new Set<string>(['schema_migrations']);
  const dropped = new Set<string>();
  for (const file of readdirSync(SQL).filter((f) => f.endsWith('.sql')).sort()) {
    const sql = readFileSync(join(SQL, file), 'utf8').replace(/--.*$/gm, '');
    for (const m of sql.matchAll(/\b(CREATE|DROP) TABLE (?:IF (?:NOT )?EXISTS )?([a-z_][a-z0-9_]*)(\s+PARTITION OF)?/gi)) {
      if (m[3]) continue;
      const table = m[2]!.toLowerCase();
      if (m[1]!.toUpperCase() === 'CREATE') {
        kept.add(table);
        dropped.delete(table);
      } else {
        kept.delete(table);
        dropped.add(table);
      }
    }
  }
  return { kept, dropped };
}

/** production.md's row of PostgreSQL in "What lives where": what a backup of it holds. */
function whatPostgresHolds(): string {
  const section = readFileSync('docs/production.md', 'utf8').split('What lives where:')[1]!.split('\n## ')[0]!;
  return section.split('\n').find((line) => line.startsWith('| PostgreSQL |'))!;
}

/** A weight in KB as the docs write it (1 KB = 1,024 bytes, one decimal). */
const kb = (bytes: number) => bytes / 1024;

describe('what the docs state about the tables', () => {
  const { kept, dropped } = migratedTables();

  it('production.md names every table the migrations make, in what a PostgreSQL backup holds', () => {
    expect(kept.size).toBeGreaterThan(15);
    const row = whatPostgresHolds();
    expect([...kept].filter((table) => !row.includes(`\`${table}\``))).toEqual([]);
  });

  it('no guide names a table the migrations dropped', () => {
    expect(dropped.size).toBeGreaterThan(0);
    const named = documents().flatMap(({ file, text }) =>
      [...text.matchAll(/`([a-z_][a-z0-9_]*)`/g)].filter((m) => dropped.has(m[1]!)).map((m) => `${file}:${lineOf(text, m.index)}: ${m[1]}`),
    );
    expect(named).toEqual([]);
  });
});

describe("what the docs state about the portal's script", () => {
  const { bytes, gzipBytes } = portalScriptWeight();
  const portal = readFileSync('docs/portal.md', 'utf8');
  const design = readFileSync('docs/DESIGN.md', 'utf8');

  it('portal.md gives its weight to a tenth of a KB or so, and the budget its test keeps', () => {
    const weight = /\*\*([\d.]+) KB, ([\d.]+) KB gzip\*\*/.exec(portal)!;
    expect(Math.abs(Number(weight[1]) - kb(bytes))).toBeLessThan(0.15);
    expect(Math.abs(Number(weight[2]) - kb(gzipBytes))).toBeLessThan(0.15);
    const budget = /the test fails past ([\d,]+) bytes \(([\d.]+) KB\)/.exec(portal)!;
    expect(Number(budget[1]!.replaceAll(',', ''))).toBe(PORTAL_SCRIPT_GZIP_BUDGET);
    expect(budget[2]).toBe(kb(PORTAL_SCRIPT_GZIP_BUDGET).toFixed(1));
  });

  it('DESIGN.md gives its gzipped weight as portal.md does', () => {
    const stated = /compiled by `tsc -b` \(([\d.]+) KB gzip\)/.exec(design)!;
    expect(Math.abs(Number(stated[1]) - kb(gzipBytes))).toBeLessThan(0.15);
  });
});

/** A guide's text with its line breaks as spaces: a code span quoting a log line may wrap. */
const flat = (file: string) => readFileSync(file, 'utf8').replace(/\s+/g, ' ');

/** Log lines the guides quote whole, each as its source writes it. */
const QUOTED_LOG_LINES: ReadonlyArray<{ source: string; message: string; docs: string[] }> = [
  {
    source: 'libs/migrations/gate.ts',
    message: 'database schema is newer than this program knows; running beside the newer migrations, which declare that it runs with them',
    docs: ['docs/production.md', 'docs/troubleshooting.md'],
  },
  { source: 'apps/dispatcher/stages/effect.ts', message: 'webhook of a deleted merchant dropped', docs: ['docs/production.md'] },
  { source: 'apps/api/portal/handlers.ts', message: 'client address is no IP address: every such client shares one link-exchange budget; check TRUST_PROXY and what the proxy writes in X-Forwarded-For', docs: ['docs/portal.md'] },
  { source: 'libs/merchants/pg-directory.ts', message: 'merchant deleted; no longer served', docs: ['docs/production.md'] },
  {
    source: 'libs/ordering/upkeep.ts',
    message: 'places in order released: their endpoint no longer orders and their end never came; the webhooks behind them go',
    docs: ['docs/operating.md'],
  },
  { source: 'libs/ordering/upkeep.ts', message: 'places in order not looked at: PostgreSQL did not answer; trying again', docs: ['docs/operating.md'] },
  {
    source: 'apps/dispatcher/stages/orphaned-places.ts',
    message: 'places in order of a redelivered webhook not looked up: PostgreSQL did not answer; held until it does',
    docs: ['docs/operating.md'],
  },
  {
    source: 'apps/dispatcher/stages/effect.ts',
    message: 'repeated upstream message dropped with a body unlike its original: its key was seen within INTAKE_DEDUPE_WINDOW; publish a corrected event with a new messageId',
    docs: ['docs/guarantees.md', 'docs/publishing.md'],
  },
  { source: 'apps/dispatcher/stages/effect.ts', message: 'message could not be parked; rejected, the broker dead-letters it to invalid', docs: ['docs/operating.md'] },
  { source: 'apps/dispatcher/stages/effect.ts', message: 'message could not be moved; retrying', docs: ['docs/operating.md'] },
  { source: 'apps/dispatcher/stages/effect.ts', message: 'message could not be moved; returned to its queue', docs: ['docs/operating.md'] },
  { source: 'libs/waits/writer.ts', message: 'waits not written; their deliveries are held unacked until PostgreSQL answers', docs: ['docs/operating.md'] },
  { source: 'apps/dispatcher/dispatcher.ts', message: 'delivery record not written; the delivery goes on without it', docs: ['docs/guarantees.md'] },
  {
    source: 'libs/merchants/pg-directory.ts',
    message: 'merchant row sealed with a key this program lacks (SECRETS_KEY, SECRETS_KEY_PREVIOUS): serving its last readable version',
    docs: ['docs/merchants.md'],
  },
  { source: 'libs/delivery-store/recorder.ts', message: 'stream deleted and declared again; reading it from its first entry', docs: ['docs/operating.md'] },
  { source: 'libs/waits/scheduler.ts', message: 'wait not picked: PostgreSQL refuses it; left in its row, out of the pick for a minute', docs: ['docs/operating.md'] },
  { source: 'libs/waits/scheduler.ts', message: "circuit's probe not made: PostgreSQL refuses one of its parked waits; left as it is, out of the probes and unparks for a minute", docs: ['docs/operating.md'] },
  { source: 'libs/waits/scheduler.ts', message: "circuit's unpark not made: PostgreSQL refuses one of its parked waits; left as it is, out of the probes and unparks for a minute", docs: ['docs/operating.md'] },
  { source: 'apps/dispatcher/stages/hand-backs.ts', message: 'wait not taken: PostgreSQL did not answer; attempted anyway', docs: ['docs/operating.md'] },
  { source: 'apps/dispatcher/stages/hand-backs.ts', message: 'wait not taken: PostgreSQL refuses its row; attempted anyway', docs: ['docs/operating.md'] },
  { source: 'apps/dispatcher/stages/hand-backs.ts', message: 'ordered wait not taken: PostgreSQL refuses its row; held until it takes it', docs: ['docs/operating.md'] },
  { source: 'apps/dispatcher/stages/hand-backs.ts', message: 'wait taken too often without an outcome: parked, its row left out of the pick', docs: ['docs/operating.md'] },
  {
    source: 'apps/dispatcher/stages/effect.ts',
    message: 'wait not ended: PostgreSQL refused it; handed back again, it is parked after WAIT_TAKE_LIMIT takes',
    docs: ['docs/operating.md'],
  },
];

describe('what the docs quote of the logs and messages', () => {
  it.each(QUOTED_LOG_LINES.map((q) => [q.message, q] as const))('"%s" is in its source and, whole, in the guides that quote it', (_, { source, message, docs }) => {
    expect(readFileSync(source, 'utf8')).toContain(message);
    for (const doc of docs) expect(`${doc}: ${flat(doc)}`).toContain(`\`${message}\``);
  });

  it("production.md's example of a newer schema refused is the message the programs exit with", () => {
    const refused = new SchemaTooNewError(4, 2, { version: 3, name: 'rename', runsWithFrom: null }).message;
    expect(flat('docs/production.md')).toContain(`\`${refused}\``);
    expect(new SchemaTooNewError(4, 2, { version: 3, name: 'rename', runsWithFrom: 3 }).message).toContain('runs only with releases from 3');
  });

  it('the guides spell the declaration a migration carries as the loader reads it', () => {
    expect(DECLARATION_SYNTAX).toBe('-- runs with releases from: NNNN');
    for (const doc of ['docs/production.md', 'docs/cli.md', 'docs/DESIGN.md']) expect(`${doc}: ${flat(doc)}`).toContain(DECLARATION_SYNTAX);
  });
});

describe('what the docs state about deleting a merchant', () => {
  /** The source files (apps/, libs/) whose statements delete tombstones. */
  function tombstoneDeleters(dir: string): string[] {
    return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) return tombstoneDeleters(path);
      return entry.name.endsWith('.ts') && readFileSync(path, 'utf8').includes('DELETE FROM merchant_tombstones') ? [path] : [];
    });
  }

  it('is removed only by a later delete, as production.md says (no upkeep after a day, not the merchant made again)', () => {
    expect([...tombstoneDeleters('apps'), ...tombstoneDeleters('libs')].sort()).toEqual(['libs/merchants/erase.ts']);
    const guide = flat('docs/production.md');
    expect(guide).toContain('its row stays until a later `merchants delete`, of any merchant, removes those older than a day');
    expect(guide).toContain('its tombstone stays (the time of the delete tells the records of the deleted merchant from the new one\'s)');
  });

  it("the delete sweeps again as production.md says: once more, SWEEP_AFTER_MS later, only after a pass that deleted anything", () => {
    expect(SWEEP_AFTER_MS).toBe(2_000);
    expect(readFileSync('libs/merchants/erase.ts', 'utf8')).toContain('if (!Object.values(deleted).some((n) => n > 0)) return deleted;');
    expect(flat('docs/production.md')).toContain('(and, when it deleted anything, 2 s later once more:');
  });
});

describe("what the docs state about PostgreSQL's connections", () => {
  const sizing = flat('docs/sizing.md');
  /** sizing.md's table: each row's program and the most it can open (the number its last column starts with). */
  const rows = readFileSync('docs/sizing.md', 'utf8')
    .split('\n')
    .map((line) => /^\| (API|dispatcher|recorder) \| `([^`]+)` \| [^|]+ \| [^|]+ \| (\d+)[:,] ([^|]*)\|$/.exec(line))
    .filter((m) => m !== null)
    .map((m) => ({ program: m[1]!, name: m[2]!, atMost: Number(m[3]), how: m[4]! }));
  const budget = (program: string) => rows.filter((r) => r.program === program).reduce((sum, r) => sum + r.atMost, 0);
  /** A replica count a manifest sets: `<key>: N`. */
  const replicas = (file: string, key: string) => Number(new RegExp(`^\\s*${key}: (\\d+)$`, 'm').exec(readFileSync(file, 'utf8'))![1]);

  it("sizing.md's budgets are its table's rows added up, and two of each program what they make", () => {
    expect(rows.length).toBe(7);
    const stated = /So budget \*\*(\d+) per API replica, (\d+) per dispatcher and (\d+) per recorder\*\*/.exec(sizing)!;
    expect(stated.slice(1).map(Number)).toEqual([budget('API'), budget('dispatcher'), budget('recorder')]);
    const two = Number(/Two of each program hold at most (\d+),/.exec(sizing)![1]);
    expect(two).toBe(2 * (budget('API') + budget('dispatcher') + budget('recorder')));
  });

  it("a row with a pool and a LISTEN counts both, and the dispatcher's waits pool is the size the program opens", () => {
    for (const { name, atMost, how } of rows) {
      const pool = /^a pool of (\d+)/.exec(how);
      if (pool) expect(`${name}: ${atMost}`).toBe(`${name}: ${Number(pool[1]) + (how.includes('`LISTEN`') ? 1 : 0)}`);
    }
    const waits = rows.find((r) => r.name === 'webhooks-dispatcher waits')!;
    const opened = /maxConnections: (\d+), applicationName: 'webhooks-dispatcher waits'/.exec(readFileSync('apps/dispatcher/program.ts', 'utf8'))!;
    expect(waits.how).toMatch(new RegExp(`^a pool of ${opened[1]} .*the \`LISTEN\` for circuits opened and closed`));
    // It hears both: a row opened (the waits' write) and closed (closeIn) is announced on the channel it listens on.
    expect(readFileSync('libs/waits/store.ts', 'utf8')).toContain("pg_notify('${CIRCUIT_CHANNEL}', json_build_object('m', merchant_id, 'e', endpoint_id, 'open', true");
    expect(readFileSync('libs/waits/circuits.ts', 'utf8')).toContain("pg_notify('${CIRCUIT_CHANNEL}', json_build_object('m', c.merchant_id, 'e', c.endpoint_id, 'open', false");
    expect(readFileSync('apps/dispatcher/circuit-rows.ts', 'utf8')).toContain('keepListening(this.db, CIRCUIT_CHANNEL,');
  });

  it("the waits row names what program.ts puts on the waits pool: the throttle's slots and adaptive rates too", () => {
    const program = readFileSync('apps/dispatcher/program.ts', 'utf8');
    expect(program).toContain('const waitsQueries = waitsDatabase ??');
    expect(program).toContain('new Throttle(waitsQueries,');
    expect(rows.find((r) => r.name === 'webhooks-dispatcher waits')!.how).toContain('the order gate, and the throttle: its slot requests');
  });

  it('sizing.md names every connection the programs and the CLI open, by its application_name, with the CLI pools sizes', () => {
    const opened = new Map<string, number | undefined>();
    const walk = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
    for (const file of walk('apps')) {
      const source = readFileSync(file, 'utf8');
      for (const m of source.matchAll(/(?:maxConnections: (\d+), )?(?:[a-zA-Z]+: [^,]+, )*applicationName: '([^']+)'/g)) opened.set(m[2]!, m[1] === undefined ? opened.get(m[2]!) : Number(m[1]));
      for (const m of source.matchAll(/(?:const name = |awaitSchemaAt\([^,]+, )'(webhooks-[^']+)'/g)) opened.set(m[1]!, opened.get(m[1]!));
    }
    expect([...opened.keys()].filter((name) => !sizing.includes(`\`${name}\``))).toEqual([]);
    // The CLI's: what sizing.md gives each, against the pool its command opens.
    for (const [name, size] of opened) {
      if (!name.startsWith('webhooks-cli ') || size === undefined) continue;
      expect(`${name}: ${new RegExp(`\`${name}\`[^;)]*?: (\\d+)`).exec(sizing)?.[1]}`).toBe(`${name}: ${size}`);
    }
  });

  it("sizing.md's disk per million webhooks gives the figures BENCHMARKS.md section 15 measured, so its parts add up to its whole", () => {
    const section = readFileSync('BENCHMARKS.md', 'utf8').split('\n## 15. ')[1]!.split('\n## ')[0]!;
    const measured = new Set([...section.matchAll(/(\d+\.\d\d) GB/g)].map((m) => m[1]!));
    // The rows section 15 measured (webhook_order's was measured on its own, as its row says).
    const rows = readFileSync('docs/sizing.md', 'utf8').split('\n').filter((line) => /^\| (PostgreSQL, the whole database|RabbitMQ, the `(deliveries|failed)` stream)/.test(line));
    expect(rows.length).toBe(3);
    const stated = rows.flatMap((row) => row.split('|').slice(1, 3).flatMap((cell) => [...cell.matchAll(/(\d+\.\d\d)(?= (?:to \d+\.\d\d )?GB)|(?<=\d+\.\d\d to )(\d+\.\d\d)(?= GB)/g)].map((m) => m[0])));
    expect(stated.length).toBeGreaterThan(8);
    expect(stated.filter((figure) => !measured.has(figure))).toEqual([]);
  });

  it("production.md and the example cluster count the autoscalers' ceilings from those budgets", () => {
    const apis = replicas('deploy/kubernetes/base/api.yaml', 'maxReplicas');
    const dispatchers = replicas('deploy/kubernetes/components/keda/scaled-object.yaml', 'maxReplicaCount');
    const recorders = replicas('deploy/kubernetes/base/recorder.yaml', 'replicas');
    const cli = Number(/`webhooks-cli`: (\d+) for a `merchants` command/.exec(sizing)![1]);
    const total = apis * budget('API') + dispatchers * budget('dispatcher') + recorders * budget('recorder') + cli;
    expect(flat('docs/production.md')).toContain(`(${apis} API replicas, ${dispatchers} dispatchers): ${total}, so the example's \`max_connections\` is 400.`);
    const cluster = readFileSync('deploy/kubernetes/overlays/example/postgres.yaml', 'utf8').replace(/\n# /g, ' ');
    expect(cluster).toContain(`${budget('API')} per API replica, ${budget('dispatcher')} per dispatcher, ${budget('recorder')} per recorder, ${cli} for the CLI;`);
    expect(cluster).toContain(`(${apis} API replicas, ${dispatchers} dispatchers) ${total}, so 400`);
    expect(total).toBeLessThan(400);
  });
});

describe('what the docs state about the migrations', () => {
  const files = readdirSync(SQL).filter((f) => f.endsWith('.sql')).sort();
  /** The number of the one migration whose statements (comments aside) match. */
  const numberOf = (statement: RegExp) => {
    const found = files.filter((f) => statement.test(readFileSync(join(SQL, f), 'utf8').replace(/--.*$/gm, '')));
    expect(found).toHaveLength(1);
    return found[0]!.slice(0, 4);
  };
  const newest = files.at(-1)!.slice(0, 4);

  it('no guide (nor BENCHMARKS.md) names a migration past the newest file', () => {
    const named = [...documents(), { file: 'BENCHMARKS.md', text: readFileSync('BENCHMARKS.md', 'utf8') }].flatMap(({ file, text }) =>
      [...text.matchAll(/\b00\d\d\b/g)].filter((m) => m[0] > newest).map((m) => `${file}:${lineOf(text, m.index)}: ${m[0]}`),
    );
    expect(named).toEqual([]);
  });

  it("the intake key's body digest and order's release by the merchants table are cited by their files' numbers", () => {
    const digest = numberOf(/ALTER TABLE intake_keys ADD COLUMN body_digest/);
    const byRecord = numberOf(/CREATE OR REPLACE FUNCTION webhook_order_release[\s\S]*\bFROM merchants\b/);
    expect(flat('docs/guarantees.md')).toContain(`(the key keeps the first body's digest, migration ${digest};`);
    expect(flat('docs/guarantees.md')).toContain(`a key taken by a release before ${digest} has no digest to compare`);
    expect(flat('docs/sizing.md')).toContain(`measured before migration ${digest}'s body digest`);
    expect(flat('BENCHMARKS.md')).toContain(`**Migration ${digest} (the body's digest on the key,`);
    expect(flat('docs/operating.md')).toContain(`both in its directory and in the \`merchants\` table (migration ${byRecord}:`);
    expect(flat('docs/DESIGN.md')).toContain(`nor the \`merchants\` table says the endpoint orders (${byRecord}).`);
  });
});

describe('what the docs state where the code departs from the shared design', () => {
  it("a breaker and an in-flight bound are a merchant's URL's, and DESIGN.md says so as a deviation from the shared design's full URL", () => {
    const url = 'https://hooks.example/in';
    expect(endpointOf('m_a', 'ep_1', url)).not.toBe(endpointOf('m_b', 'ep_1', url));
    const design = flat('docs/DESIGN.md');
    expect(design).toContain('Isolation is per webhook endpoint (its merchant, its id and its full URL), never per host');
    expect(design).toContain('(Deviation from the shared design, which keys both by the full URL alone:');
    expect(flat('docs/operating.md')).toContain('Isolation is per endpoint (its merchant, its id and its full URL)');
  });

  it("operating.md labels an open circuit's series by origin and its one merchant, as the dispatcher does", async () => {
    const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 1, cooldownMs: 30_000, maxCooldownMs: 600_000 });
    for (const merchantId of ['m_b', 'm_a']) {
      const admission = await guards.acquire(endpointOf(merchantId, 'ep_1', 'https://hooks.example/in/secret-path'), { merchantId, canDefer: false, force: false }, () => false);
      if (admission?.kind !== 'send') throw new Error(`expected to send, got ${admission?.kind}`);
      // Open as its row is (CircuitRows): the failure opens the row, the row the breaker.
      guards.openCircuit(endpointOf(merchantId, 'ep_1', 'https://hooks.example/in/secret-path'), admission.release('failed', 'HTTP 500'), 30_000);
    }
    expect(guards.openEndpoints().sort()).toEqual(['https://hooks.example (m_a)', 'https://hooks.example (m_b)']);
    expect(flat('docs/operating.md')).toContain("| 1 per merchant's URL whose circuit is open (labelled `origin (merchant)`, never the URL's path");
  });
});

describe("what the docs state about the circuits' rows and the waits' takes", () => {
  it('every channel a guide says is notified is one the code notifies on', () => {
    const channels = new Set([CIRCUIT_CHANNEL, CHANGES_CHANNEL]);
    const named = documents().flatMap(({ file, text }) => [...text.matchAll(/`NOTIFY ([a-z_]+)`/g)].map((m) => ({ at: `${file}:${lineOf(text, m.index)}`, channel: m[1]! })));
    expect(named.length).toBeGreaterThanOrEqual(2);
    expect(named.filter(({ channel }) => !channels.has(channel))).toEqual([]);
  });

  it("a row closed with no answer: the next failure opens it again with the cooldown doubled, as operating.md says", async () => {
    const cooldownMs = 30_000;
    const guards = new EndpointGuards({ maxInFlight: 1, failureThreshold: 5, cooldownMs, maxCooldownMs: 600_000 });
    const key = endpointOf('m_a', 'ep_1', 'https://hooks.example/in');
    guards.openCircuit(key, cooldownMs, cooldownMs);
    guards.closeCircuit(key, false);
    const admission = await guards.acquire(key, { merchantId: 'm_a', canDefer: false, force: false }, () => false);
    if (admission?.kind !== 'send') throw new Error(`expected to send, got ${admission?.kind}`);
    expect(admission.release('failed', 'HTTP 500')).toBe(2 * cooldownMs);
    expect(flat('docs/operating.md')).toContain('but the next failure seen by a dispatcher that knew the endpoint opens it again, as a failed probe does (the cooldown doubled, up to 10 minutes)');
  });

  it('the guides give the takes bound as WAIT_TAKE_LIMIT is, and the take that parks as the one after it', () => {
    const stated = documents().flatMap(({ file, text }) => {
      const flatText = text.replace(/\s+/g, ' ');
      return [
        ...[...flatText.matchAll(/(\d+) times \(`WAIT_TAKE_LIMIT`\)|`WAIT_TAKE_LIMIT`, (\d+)\b|`WAIT_TAKE_LIMIT` \((\d+)\)|taken to its attempt (\d+) times/g)].map((m) => ({
          at: `${file}: ${m[0]}`,
          n: Number(m[1] ?? m[2] ?? m[3] ?? m[4]),
          wanted: WAIT_TAKE_LIMIT,
        })),
        ...[...flatText.matchAll(/the (\d+)th \(`WAIT_TAKE_LIMIT`|Parked at the (\d+)th take/g)].map((m) => ({ at: `${file}: ${m[0]}`, n: Number(m[1] ?? m[2]), wanted: WAIT_TAKE_LIMIT + 1 })),
      ];
    });
    expect(stated.length).toBeGreaterThanOrEqual(5);
    expect(stated.filter(({ n, wanted }) => n !== wanted)).toEqual([]);
  });
});

describe('what the OpenAPI descriptions state of a reference', () => {
  it('they name every character the resend refuses: control characters and lone surrogates', () => {
    expect(isWellFormedReference('a\u0001')).toBe(false);
    expect(isWellFormedReference('a\ud800')).toBe(false);
    const resend = ROUTES.find((route) => route.operationId === 'resendWebhook')!;
    expect(referenceSchema.description).toContain('any except control characters and lone UTF-16 surrogates');
    expect(resend.errors['400']).toContain('invalid_reference: repeated, longer than 200 characters, or holding a control character or a lone UTF-16 surrogate');
  });
});

describe("what the docs state about the throttle's minute read of lowered rates", () => {
  it('limits.md bounds it as throttle.ts does: the REMEMBERED_ENDPOINTS changed last', () => {
    const throttle = readFileSync('apps/dispatcher/stages/throttle.ts', 'utf8');
    expect(throttle).toContain('endpointRates(this.db, REMEMBERED_ENDPOINTS)');
    expect(readFileSync('libs/merchants/endpoint-rate.ts', 'utf8')).toContain('FROM endpoint_rates ORDER BY changed_at DESC LIMIT $1');
    expect(flat('docs/limits.md')).toContain(`at most the ${REMEMBERED_ENDPOINTS.toLocaleString('en-US')} changed last (\`REMEMBERED_ENDPOINTS\` in the same file)`);
  });
});

describe("what the docs state about the 409s of a resend and of a portal test event", () => {
  it('resending.md and architecture.md give the order the resend answers in when nothing went: webhook_disabled, event_not_subscribed, endpoint_deleted', () => {
    const code = readFileSync('libs/failed/resend.ts', 'utf8');
    const thrown = [
      'if (kept.disabled.size > 0) throw new WebhookDisabledError',
      "if (kept['not-subscribed'].size > 0) throw new EventNotSubscribedError",
      'throw kept.deleted.size > 0 ? new EndpointDeletedError',
    ].map((line) => code.indexOf(line));
    expect(thrown.every((at, i) => at >= 0 && (i === 0 || at > thrown[i - 1]!))).toBe(true);
    const resending = flat('docs/resending.md');
    const rows = ['| 409 | `webhook_disabled` |', '| 409 | `event_not_subscribed` |', '| 409 | `endpoint_deleted` |'].map((row) => resending.indexOf(row));
    expect(rows.every((at, i) => at >= 0 && (i === 0 || at > rows[i - 1]!))).toBe(true);
    expect(resending).toContain('or nothing went and a failure found is of a disabled endpoint;');
    expect(resending).toContain('| nothing went, none of the failures found is of a disabled endpoint, and one is of an endpoint whose `events` no longer include its event;');
    expect(resending).toContain('| every failure found is of an endpoint deleted since:');
    expect(flat('docs/architecture.md')).toContain('`event_not_subscribed` or, when every one is of a deleted endpoint, `endpoint_deleted`, in that order');
  });

  it('portal.md says a test event for an endpoint that is off or does not take the event is refused, as the portal does', () => {
    const handlers = readFileSync('apps/api/portal/endpoint-handlers.ts', 'utf8');
    expect(handlers).toContain("if (!target.enabled) throw new ApiError(409, 'webhook_disabled'");
    expect(handlers).toContain("if (!receivesEvent(target, input.data.event)) throw new ApiError(409, 'event_not_subscribed'");
    const portal = flat('docs/portal.md');
    expect(portal).toContain('while it is disabled, or for an event it does not receive, the call answers 409 `webhook_disabled` or `event_not_subscribed` and sends nothing');
    expect(portal).toContain('a test event for an endpoint that is disabled (`webhook_disabled`) or does not receive that event (`event_not_subscribed`): nothing is sent');
  });
});
