import { readFileSync } from 'node:fs';
import type { z } from 'zod';
import { apiEnvSchema } from '../../apps/api/config.js';
import { cliEnvSchema } from '../../apps/cli/config.js';
import { demoReceiverEnvSchema } from '../../apps/demo-receiver/config.js';
import { dispatcherEnvSchema } from '../../apps/dispatcher/config.js';
import { recorderEnvSchema } from '../../apps/recorder/config.js';

/** The guide whose table says what each variable does. */
const GUIDE = 'docs/configuration.md';

const schemas: Record<string, z.ZodObject> = {
  api: apiEnvSchema as unknown as z.ZodObject,
  dispatcher: dispatcherEnvSchema as unknown as z.ZodObject,
  recorder: recorderEnvSchema as unknown as z.ZodObject,
  cli: cliEnvSchema as unknown as z.ZodObject,
  'demo-receiver': demoReceiverEnvSchema as unknown as z.ZodObject,
};

describe('the configuration guide', () => {
  const guide = readFileSync(GUIDE, 'utf8');
  const example = readFileSync('.env.example', 'utf8');

  it.each(Object.entries(schemas))('names every variable the %s reads, in its table and in .env.example', (_, schema) => {
    const variables = Object.keys(schema.shape);
    expect(variables.length).toBeGreaterThan(2);
    // A row's first cell may name several (`AUTH_JWT_ISSUER` / `AUTH_JWT_AUDIENCE`).
    const rows = new Set([...guide.matchAll(/^\|([^|\n]+)\|/gm)].flatMap((m) => [...m[1]!.matchAll(/`([A-Z0-9_]+)`/g)].map((n) => n[1])));
    expect(variables.filter((name) => !rows.has(name))).toEqual([]);
    expect(variables.filter((name) => !new RegExp(`^#? ?${name}=`, 'm').test(example))).toEqual([]);
  });
});
