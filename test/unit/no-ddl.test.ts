/**
 * No program changes the schema: every CREATE TABLE and ALTER TABLE is in a numbered migration
 * (libs/migrations/sql, applied by `webhooks migrate`), not in the sources of apps/ or libs/. The
 * one exception is data's lifecycle, not schema: the day partitions of delivery_records (made by
 * the recorder) and of intake_keys (made ahead by the dispatchers), both by ensurePartition in
 * libs/delivery-store/schema.ts, and the runner's own ledger.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const DDL = /\b(CREATE\s+(UNLOGGED\s+)?TABLE|ALTER\s+TABLE|CREATE\s+(UNIQUE\s+)?INDEX|DROP\s+COLUMN|RENAME\s+TO)\b/i;
const ALLOWED = [
  // A day's partition: of records, made as records arrive; of intake keys, made ahead.
  { file: 'libs/delivery-store/schema.ts', line: /CREATE TABLE IF NOT EXISTS \$\{table\}_\$\{day\.replaceAll\('-', ''\)\} PARTITION OF \$\{table\}/ },
];

function sources(dir: string): string[] {
  return readdirSync(join(REPO, dir), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => join(entry.parentPath, entry.name).slice(REPO.length));
}

/** Lines of `files` that issue DDL, less the allowed ones. */
function ddlLines(files: Array<{ file: string; text: string }>): string[] {
  return files.flatMap(({ file, text }) =>
    text
      .split('\n')
      .map((line, i) => ({ line, at: `${file}:${i + 1}` }))
      .filter(({ line }) => !line.trim().startsWith('//') && !line.trim().startsWith('*') && DDL.test(line))
      .filter(({ line }) => !ALLOWED.some((allowed) => allowed.file === file && allowed.line.test(line)))
      .map(({ line, at }) => `${at}: ${line.trim()}`),
  );
}

describe('the schema is made by migrations alone', () => {
  it('finds no CREATE TABLE, ALTER TABLE or CREATE INDEX in apps/ or libs/ outside libs/migrations', () => {
    const files = [...sources('apps'), ...sources('libs')]
      .filter((file) => !file.startsWith('libs/migrations/'))
      .map((file) => ({ file, text: readFileSync(join(REPO, file), 'utf8') }));
    expect(files.length).toBeGreaterThan(100);
    expect(ddlLines(files)).toEqual([]);
  });

  it('would see one: a start-up ALTER, a CREATE in a template string', () => {
    expect(ddlLines([{ file: 'libs/x.ts', text: "  await db.query('ALTER TABLE merchants ADD COLUMN x text');" }])).toHaveLength(1);
    expect(ddlLines([{ file: 'libs/x.ts', text: '  `CREATE TABLE IF NOT EXISTS portal_links (' }])).toHaveLength(1);
    expect(ddlLines([{ file: 'libs/delivery-store/schema.ts', text: "  `CREATE TABLE IF NOT EXISTS ${table}_${day.replaceAll('-', '')} PARTITION OF ${table} FOR" }])).toEqual([]);
  });
});
