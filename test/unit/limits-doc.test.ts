import { readFileSync } from 'node:fs';
import type { z } from 'zod';
import { apiEnvSchema } from '../../apps/api/config.js';
import { cliEnvSchema } from '../../apps/cli/config.js';
import { demoReceiverEnvSchema } from '../../apps/demo-receiver/config.js';
import { dispatcherEnvSchema } from '../../apps/dispatcher/config.js';
import { recorderEnvSchema } from '../../apps/recorder/config.js';
import { DEFAULT_POLL_INTERVAL_MS } from '../../libs/merchants/pg-directory.js';
import { documents, lineOf } from '../support/docs.js';

/**
 * docs/limits.md lists every bound with its value and what sets it. Each row's "set by" cell names
 * either variables (which a program's config schema must read, and whose default the "value" cell
 * states) or `fixed: NAME in path` (a constant the value cell states). A value cell whose bound is
 * neither (derived, or fixed without a constant) holds no number, so nothing unchecked is stated.
 */
const PAGE = 'docs/limits.md';

const schemas: z.ZodObject[] = [apiEnvSchema, dispatcherEnvSchema, recorderEnvSchema, cliEnvSchema, demoReceiverEnvSchema].map(
  (schema) => schema as unknown as z.ZodObject,
);

const UNITS: Record<string, number> = {
  ms: 1, s: 1_000, min: 60_000, h: 3_600_000, day: 86_400_000, days: 86_400_000,
  KiB: 1024, MiB: 1024 ** 2, MB: 1e6, GB: 1e9, characters: 1, records: 1,
};

/** The numbers a value cell states, each in base units (ms, bytes, a count): `5 s, 5 min` → [5000, 300000]. */
export function numbersOf(cell: string): number[] {
  return [...cell.matchAll(/(\d[\d,]*(?:\.\d+)?)(?:\s*(ms|s|min|h|days?|KiB|MiB|MB|GB)\b)?/g)].map(([, n, unit]) => Number(n!.replaceAll(',', '')) * (unit ? UNITS[unit]! : 1));
}

/** A constant's numbers in the same units: strings such as '16kb' (express) and '7D' (RabbitMQ max-age) too. */
function numbersOfValue(value: unknown, name: string): number[] {
  if (typeof value === 'number') return [/seconds/i.test(name) ? value * 1000 : value];
  if (Array.isArray(value)) return value.flatMap((item) => numbersOfValue(item, name));
  if (typeof value === 'string') {
    const express = /^(\d+)kb$/i.exec(value);
    if (express) return [Number(express[1]) * 1024];
    const age = /^(\d+)([Dhms])$/.exec(value);
    if (age) return [Number(age[1]) * { D: 86_400_000, h: 3_600_000, m: 60_000, s: 1_000 }[age[2] as 'D']];
  }
  if (value && typeof value === 'object' && 'perMinute' in value && 'burst' in value) return [Number(value.perMinute), Number(value.burst)];
  return [];
}

interface Row {
  line: string;
  value: string;
  setBy: string;
}

function rowsOf(page: string): Row[] {
  return page
    .split('\n')
    .filter((line) => line.startsWith('|') && !/^\|[-| ]+\|$/.test(line) && !line.startsWith('| bound |'))
    .map((line) => {
      const cells = line.split('|').slice(1, -1).map((cell) => cell.trim());
      return { line, value: cells[1] ?? '', setBy: cells[2] ?? '' };
    });
}

/** `fixed: A, B in path1, C in path2` → [[A, path1], [B, path1], [C, path2]]. */
function constantsOf(setBy: string): Array<[string, string]> {
  const found: Array<[string, string]> = [];
  let pending: string[] = [];
  for (const [, token] of setBy.matchAll(/`([^`]+)`/g)) {
    if (token!.endsWith('.ts')) {
      found.push(...pending.map((name): [string, string] => [name, token!]));
      pending = [];
    } else pending.push(token!);
  }
  if (pending.length > 0) throw new Error(`${pending.join(', ')}: no file named after them`);
  return found;
}

async function constantValue(name: string, path: string): Promise<unknown> {
  const module = (await import(`../../${path.replace(/\.ts$/, '.js')}`)) as Record<string, unknown>;
  const [head, ...fields] = name.split('.');
  let value: unknown = module[head!];
  if (value === undefined) throw new Error(`${path} exports no ${head}`);
  for (const field of fields) value = (value as Record<string, unknown>)[field];
  return value;
}

/** What a page of this shape says wrong; empty when every row holds. */
export async function problemsOf(page: string): Promise<string[]> {
  const problems: string[] = [];
  const rows = rowsOf(page);
  if (rows.length < 20) problems.push(`only ${rows.length} rows`);
  for (const row of rows) {
    const stated = numbersOf(row.value);
    if (row.setBy.startsWith('fixed')) {
      const constants = constantsOf(row.setBy);
      const actual: number[] = [];
      for (const [name, path] of constants) actual.push(...numbersOfValue(await constantValue(name, path), name));
      if (constants.length === 0 ? stated.length > 0 : JSON.stringify(stated) !== JSON.stringify(actual)) {
        problems.push(`${row.line}\n  states ${JSON.stringify(stated)}, the code has ${JSON.stringify(actual)}`);
      }
      continue;
    }
    const variables = [...row.setBy.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => m[1]!);
    if (variables.length === 0) {
      problems.push(`${row.line}\n  names neither a variable nor a fixed constant`);
      continue;
    }
    for (const variable of variables) {
      if (!schemas.some((schema) => variable in schema.shape)) problems.push(`${row.line}\n  ${variable} is read by no program`);
    }
    const schema = schemas.find((s) => variables[0]! in s.shape);
    if (!schema || stated.length === 0) continue;
    const parsed = (schema.shape[variables[0]!] as z.ZodType).safeParse(undefined);
    const defaults = parsed.success ? numbersOfValue(parsed.data, variables[0]!) : [];
    if (JSON.stringify(stated) !== JSON.stringify(defaults)) {
      problems.push(`${row.line}\n  states ${JSON.stringify(stated)}, ${variables[0]}'s default is ${JSON.stringify(defaults)}`);
    }
  }
  return problems;
}

describe('docs/limits.md', () => {
  const page = readFileSync(PAGE, 'utf8');

  it('states each bound as the code has it: variables read by a program with their defaults, fixed values as their constants', async () => {
    expect(await problemsOf(page)).toEqual([]);
  });

  it('is restated elsewhere as the code has it: the merchant directory\'s poll, wherever a guide gives it in seconds', () => {
    const stated: string[] = [];
    const wrong: string[] = [];
    for (const { file, text } of documents()) {
      for (const m of text.matchAll(/\bpoll\b[^.]{0,50}?\b(\d+) ?s\b|\b(\d+) ?s poll\b/g)) {
        stated.push(`${file}:${lineOf(text, m.index)}`);
        if (Number(m[1] ?? m[2]) * 1000 !== DEFAULT_POLL_INTERVAL_MS) wrong.push(`${file}:${lineOf(text, m.index)}: ${m[0]}`);
      }
    }
    expect(stated.length).toBeGreaterThanOrEqual(3);
    expect(wrong).toEqual([]);
  });

  it('catches a wrong number, fixed or default', async () => {
    const fixed = page.replace('| resends of one webhook | 10 |', '| resends of one webhook | 12 |');
    const byDefault = page.replace('| requests in flight per dispatcher | 64 |', '| requests in flight per dispatcher | 32 |');
    const unknown = page.replace('`DISPATCH_CONCURRENCY` | to all', '`DISPATCH_CONCURENCY` | to all');
    expect(fixed).not.toBe(page);
    expect(await problemsOf(fixed)).toEqual([expect.stringContaining('states [12], the code has [10]')]);
    expect(await problemsOf(byDefault)).toEqual([expect.stringContaining("DISPATCH_CONCURRENCY's default is [64]")]);
    expect(await problemsOf(unknown)).toEqual([expect.stringContaining('DISPATCH_CONCURENCY is read by no program')]);
  });

  it('reads values in the units it says', () => {
    expect(numbersOf('5 s, 5 min, 30 min, 2 h, 10 h')).toEqual([5_000, 300_000, 1_800_000, 7_200_000, 36_000_000]);
    expect(numbersOf('256 KiB')).toEqual([262_144]);
    expect(numbersOf('60 a minute, bursts of 20')).toEqual([60, 20]);
    expect(numbersOf('2,048 characters')).toEqual([2_048]);
    expect(numbersOf('half of DISPATCH_CONCURRENCY')).toEqual([]);
  });
});
