import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { z } from 'zod';
import { apiEnvSchema } from '../../apps/api/config.js';
import { cliEnvSchema } from '../../apps/cli/config.js';
import { demoReceiverEnvSchema } from '../../apps/demo-receiver/config.js';
import { dispatcherEnvSchema } from '../../apps/dispatcher/config.js';
import { recorderEnvSchema } from '../../apps/recorder/config.js';
import { tracingFields, tracingSettingsOf } from '../../libs/config/index.js';
import { parseEnv } from '../../libs/config/env.js';
import { z as zod } from 'zod';

/**
 * docs/configuration.md's table against the code. The table has one row per variable (or per
 * group: `A` / `B`), and its cells follow a convention this test parses:
 * - "default": the value a program uses when the variable is unset, in backticks first
 *   (`30s`: the text the schema's default is, as you would write it), or words (unset, required
 *   ...). Several variables in one row: one default per variable, separated by " / ". Programs
 *   whose defaults differ: "dispatcher `9464`; API, recorder unset".
 * - "used by": exactly the programs that read it, comma-separated, from API, dispatcher,
 *   recorder, CLI, demo receiver; after CLI, backticked command names may say which commands use
 *   it (`CLI `merchants`, `log``). `npm start` runs the API, the dispatcher and the recorder in one
 *   process and reads what they read.
 *
 * What counts as read: the keys of each program's zod schema, and the reads outside them declared
 * below (each must still be found in the sources, and every `env.X` / `process.env.X` in apps/ and
 * libs/ must be documented). Variables read only by the tests, the benchmarks or CI
 * (RABBITMQ_NODENAME, CHROMIUM_PATH, RUNS_ALONE, TEST_DATABASE_PREFIX, BENCH_*) are not
 * configuration of the product: README.md and BENCHMARKS.md describe them where they are used.
 */
const GUIDE = 'docs/configuration.md';

type Program = 'API' | 'dispatcher' | 'recorder' | 'CLI' | 'demo receiver';
const PROGRAMS: readonly Program[] = ['API', 'dispatcher', 'recorder', 'CLI', 'demo receiver'];

const schemas: Record<Program, z.ZodObject> = {
  API: apiEnvSchema as unknown as z.ZodObject,
  dispatcher: dispatcherEnvSchema as unknown as z.ZodObject,
  recorder: recorderEnvSchema as unknown as z.ZodObject,
  CLI: cliEnvSchema as unknown as z.ZodObject,
  'demo receiver': demoReceiverEnvSchema as unknown as z.ZodObject,
};

/** Variables read outside the schemas (`ctx.env.X`, `env.NODE_ENV`), and by which programs. */
const READ_OUTSIDE_SCHEMAS: Record<string, Program[]> = {
  // devModeWarning (libs/config/dev.ts): the programs warn that NODE_ENV=development switches nothing on.
  NODE_ENV: ['API', 'dispatcher', 'recorder'],
  // The CLI's `log` and `portal` find the API and sign an admin token (apps/cli/token.ts),
  // `token` mints a merchant's (apps/cli/token.ts).
  WEBHOOKS_API_URL: ['CLI'],
  WEBHOOKS_ADMIN_TOKEN: ['CLI'],
  PORT: ['CLI'],
  ADMIN_PORT: ['CLI'],
  AUTH_JWT_SECRET: ['CLI'],
  AUTH_JWT_ISSUER: ['CLI'],
  AUTH_JWT_AUDIENCE: ['CLI'],
  // apps/cli/program.ts: a broker refusing the connection names the URL's host (its password hidden).
  RABBITMQ_URL: ['CLI'],
};

/** Defaults applied after parsing (libs/config/tracing.ts), computed here from the code itself. */
const traced = tracingSettingsOf(parseEnv(zod.object(tracingFields), { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }), 'x')!;
const APPLIED_LATER: Record<string, string> = {
  OTEL_EXPORTER_OTLP_PROTOCOL: traced.protocol,
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: traced.protocol,
  OTEL_TRACES_SAMPLER: traced.sampler.name,
  OTEL_TRACES_SAMPLER_ARG: String(traced.sampler.ratio),
};

/** The text a variable defaults to in a schema: a zod `.default()`'s, or a number an optional field turns into. */
function literalDefault(field: z.ZodType): string | undefined {
  let at: z.ZodType = field;
  for (let depth = 0; depth < 10; depth++) {
    const def = (at as unknown as { _zod: { def: { type: string; defaultValue?: unknown; in?: z.ZodType; innerType?: z.ZodType } } })._zod.def;
    if (def.type === 'default') return def.defaultValue === '' ? undefined : String(def.defaultValue);
    if (def.type === 'pipe') at = def.in!;
    else break;
  }
  const parsed = field.safeParse(undefined);
  return parsed.success && typeof parsed.data === 'number' ? String(parsed.data) : undefined;
}

interface Row {
  variables: string[];
  defaults: string;
  usedBy: string;
  meaning: string;
}

function tableRows(guide: string): Row[] {
  return [...guide.matchAll(/^\| *`[A-Z].*\|$/gm)].map((m) => {
    const cells = m[0].slice(1, -1).split('|').map((cell) => cell.trim());
    return { variables: [...cells[0]!.matchAll(/`([A-Z0-9_]+)`/g)].map((n) => n[1]!), defaults: cells[1]!, usedBy: cells[2]!, meaning: cells.slice(3).join('|') };
  });
}

/** The programs a "used by" cell names; undefined when it holds something else. */
function programsOf(cell: string): Set<string> {
  return new Set(
    cell
      .replace(/`[^`]*`/g, '')
      .split(',')
      .map((part) => part.trim())
      .filter((part) => part !== ''),
  );
}

/** The default a cell (or its part for one program) shows: its first backticked value, if it starts with one. */
function shownDefault(text: string, program: Program): string | undefined {
  let part = text;
  if (text.includes(';')) {
    const names = PROGRAMS.join('|');
    for (const segment of text.split(';')) {
      const m = new RegExp(`^\\s*((?:${names})(?:,\\s*(?:${names}))*)\\s+(.*)$`).exec(segment);
      if (m && m[1]!.split(',').map((n) => n.trim()).includes(program)) part = m[2]!;
    }
  }
  return /^`([^`]*)`/.exec(part.trim())?.[1];
}

/** Every `env.X`, `env['X']` and `process.env.X` in apps/ and libs/ (tests and benchmarks apart). */
function namesReadInSources(): Set<string> {
  const names = new Set<string>();
  for (const root of ['apps', 'libs']) {
    for (const file of readdirSync(root, { recursive: true }).map(String)) {
      // The portal's browser code reads no environment (its `process.env.WEBHOOK_SECRET` is a snippet shown to merchants).
      if (!file.endsWith('.ts') || file.startsWith(join('api', 'portal', 'ui'))) continue;
      const text = readFileSync(join(root, file), 'utf8');
      for (const m of text.matchAll(/\benv(?:\.|\[['"])([A-Z][A-Z0-9_]*)/g)) names.add(m[1]!);
    }
  }
  return names;
}

/**
 * What the "meaning" cells say wrong about bounds. A variable of a row of its own that takes a
 * number (`1` or `0`) is checked against the first bound its cell states, `A to B` or `at most B`:
 * every program's field takes B (and A) and refuses B + 1 (and A - 1). One that takes `1` and `2`
 * and refuses a huge number is bounded, and must state its bounds.
 */
function boundProblems(rows: readonly Row[]): { checked: number; problems: string[] } {
  const problems: string[] = [];
  let checked = 0;
  for (const row of rows.filter((r) => r.variables.length === 1)) {
    const variable = row.variables[0]!;
    const fields = PROGRAMS.map((p) => schemas[p].shape[variable] as z.ZodType | undefined).filter((f): f is z.ZodType => f !== undefined);
    const takes = (value: number | string) => fields.length > 0 && fields.every((f) => f.safeParse(String(value)).success);
    if (!takes(1) && !takes(0)) continue;
    const m = /\b(\d[\d,]*) to (\d[\d,]*)\b|\bat most (\d[\d,]*)\b/.exec(row.meaning);
    if (!m) {
      if (takes(1) && takes(2) && fields.every((f) => !f.safeParse('99999999999999').success)) problems.push(`${variable}: its cell states no bounds`);
      continue;
    }
    checked++;
    const number = (text: string) => Number(text.replaceAll(',', ''));
    const high = number(m[2] ?? m[3]!);
    if (!takes(high) || fields.some((f) => f.safeParse(String(high + 1)).success)) problems.push(`${variable}: the cell says at most ${high}, the schema differs`);
    if (m[1] !== undefined) {
      const low = number(m[1]);
      if (!takes(low) || (low > 0 && fields.some((f) => f.safeParse(String(low - 1)).success))) problems.push(`${variable}: the cell says at least ${low}, the schema differs`);
    }
  }
  return { checked, problems };
}

function readers(variable: string): Set<string> {
  const programs = new Set<string>(READ_OUTSIDE_SCHEMAS[variable] ?? []);
  for (const program of PROGRAMS) if (variable in schemas[program].shape) programs.add(program);
  return programs;
}

describe('the configuration guide', () => {
  const guide = readFileSync(GUIDE, 'utf8');
  const example = readFileSync('.env.example', 'utf8');
  const rows = tableRows(guide);
  const documented = new Map(rows.flatMap((row) => row.variables.map((v) => [v, row] as const)));
  const everyVariable = [...new Set([...PROGRAMS.flatMap((p) => Object.keys(schemas[p].shape)), ...Object.keys(READ_OUTSIDE_SCHEMAS)])];

  it('has a row for every variable a program reads, and every variable is in .env.example', () => {
    expect(rows.length).toBeGreaterThan(30);
    expect(everyVariable.filter((name) => !documented.has(name))).toEqual([]);
    expect(everyVariable.filter((name) => !new RegExp(`^#? ?${name}=`, 'm').test(example))).toEqual([]);
  });

  it('documents every variable the sources read, and no variable nothing reads', () => {
    const inSources = namesReadInSources();
    expect([...inSources].filter((name) => !documented.has(name))).toEqual([]);
    // A read declared above that the sources no longer make is a stale declaration.
    expect(Object.keys(READ_OUTSIDE_SCHEMAS).filter((name) => !inSources.has(name))).toEqual([]);
    expect([...documented.keys()].filter((name) => readers(name).size === 0)).toEqual([]);
  });

  it('names, in "used by", exactly the programs that read each variable', () => {
    const wrong = rows.flatMap((row) =>
      row.variables
        .map((variable) => ({ variable, cell: row.usedBy, expected: [...readers(variable)].sort(), shown: [...programsOf(row.usedBy)].sort() }))
        .filter(({ expected, shown }) => expected.join() !== shown.join()),
    );
    expect(wrong).toEqual([]);
  });

  it('gives, in "default", each program\'s default as its schema has it', () => {
    const wrong: unknown[] = [];
    for (const row of rows) {
      const slots = row.defaults.split(' / ');
      row.variables.forEach((variable, i) => {
        const slot = slots.length === row.variables.length ? slots[i]! : row.defaults;
        for (const program of readers(variable) as Set<Program>) {
          const field = schemas[program].shape[variable] as z.ZodType | undefined;
          // Read outside the schemas: no default to compare with; OTEL_SERVICE_NAME: the next test.
          if (!field || variable === 'OTEL_SERVICE_NAME') continue;
          const expected = literalDefault(field) ?? APPLIED_LATER[variable];
          const shown = shownDefault(slot, program);
          if (shown !== expected) wrong.push({ variable, program, expected, shown, cell: slot });
        }
      });
    }
    expect(wrong).toEqual([]);
  });

  it('names each program\'s default service name in OTEL_SERVICE_NAME\'s row', () => {
    const names = new Set<string>();
    for (const file of readdirSync('apps', { recursive: true }).map(String).filter((f) => f.endsWith('.ts'))) {
      const text = readFileSync(join('apps', file), 'utf8');
      for (const m of text.matchAll(/tracingSettingsOf\([^,]+, '([^']+)'\)/g)) names.add(m[1]!);
      // A program's main.ts names its service; runProgram (libs/runtime/entry.ts) makes it `webhooks-<service>`, or its `tracingName`.
      for (const m of text.matchAll(/runProgram\(process\.env, '([^']+)'/g)) names.add(/tracingName: '([^']+)'/.exec(text)?.[1] ?? `webhooks-${m[1]!}`);
    }
    expect(names.size).toBeGreaterThanOrEqual(5);
    const cell = documented.get('OTEL_SERVICE_NAME')!.defaults;
    expect([...names].filter((name) => !cell.includes(`\`${name}\``))).toEqual([]);
  });

  it('states the bounds of every number a variable takes, as its schema has them', () => {
    const { checked, problems } = boundProblems(rows);
    expect(checked).toBeGreaterThan(10);
    expect(problems).toEqual([]);
    // And it would tell: a bound the schema does not have, a bound left out.
    const moved = rows.map((row) => ({ ...row, meaning: row.meaning.replace('1 to 300000', '1 to 600000') }));
    const unsaid = rows.map((row) => ({ ...row, meaning: row.meaning.replace(', 1 to 10000,', ',') }));
    expect(boundProblems(moved).problems).toEqual(['DELIVERY_TIMEOUT_MS: the cell says at most 600000, the schema differs']);
    expect(boundProblems(unsaid).problems).toEqual(['DISPATCH_CONCURRENCY: its cell states no bounds']);
  });

  it('says when the dispatcher needs DATABASE_URL as its schema decides: outside development mode, with a single attempt too', () => {
    const refused = (env: Record<string, string>) => {
      try {
        parseEnv(dispatcherEnvSchema as unknown as z.ZodObject, env);
        return undefined;
      } catch (err) {
        return (err as { variable?: string }).variable;
      }
    };
    expect(refused({})).toBe('DATABASE_URL');
    expect(refused({ RETRY_SCHEDULE: '' })).toBe('DATABASE_URL');
    expect(refused({ WEBHOOKS_DEV: 'true', SECRETS_KEY: Buffer.alloc(32, 7).toString('base64') })).toBeUndefined();
    expect(documented.get('DATABASE_URL')!.defaults).toContain('outside development mode for the API and the dispatcher (merchants live there, whatever `DELIVERY_LOG` and `RETRY_SCHEDULE` say)');
    expect(example).toMatch(/by the API and the dispatcher\n# \(merchants live there, whatever DELIVERY_LOG and RETRY_SCHEDULE say\)/);
  });

  it('gives in .env.example, where it sets a value, the schema\'s default', () => {
    const wrong: unknown[] = [];
    for (const m of example.matchAll(/^#? ?([A-Z][A-Z0-9_]*)=(\S*)/gm)) {
      const [, variable, value] = m;
      if (!value || value.includes('...')) continue;
      for (const program of PROGRAMS) {
        const field = schemas[program].shape[variable!] as z.ZodType | undefined;
        if (!field) continue;
        const expected = literalDefault(field) ?? APPLIED_LATER[variable!];
        if (value !== expected) wrong.push({ variable, program, expected, value });
      }
    }
    expect(wrong).toEqual([]);
  });
});
