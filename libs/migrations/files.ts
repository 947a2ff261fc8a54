import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** One numbered SQL file: `NNNN_name.sql`, applied in version order, each in one transaction. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** checksumOf the file: a file changed after it ran is refused (a change is a new file). */
  checksum: string;
}

/**
 * tsc does not copy .sql files to dist/: the built module reads the package's libs/migrations/sql
 * (docker/Dockerfile copies it into the image), the source module (tests) the one beside it.
 */
export const SQL_DIR = [new URL('./sql/', import.meta.url), new URL('../../../libs/migrations/sql/', import.meta.url)]
  .map((url) => fileURLToPath(url))
  .find((dir) => existsSync(dir))!;

const FILE_NAME = /^(\d{4})_([a-z0-9_]+)\.sql$/;

/**
 * A UTF-8 byte order mark, which some Windows editors put first in a file they save: PostgreSQL
 * reads it as part of the first word ('syntax error at or near "\uFEFF"'), so it is no part of the SQL.
 */
function withoutBom(text: string): string {
  return text.startsWith('\uFEFF') ? text.slice(1) : text;
}

/**
 * sha256 of the text with CRLF read as LF and without a leading BOM: a checkout with CRLF endings
 * (Windows core.autocrlf, an editor) or saved with a BOM is the same migration. An LF file's
 * checksum is its bytes', as the ledger has always held.
 */
export function checksumOf(sql: string): string {
  return createHash('sha256').update(withoutBom(sql).replace(/\r\n/g, '\n')).digest('hex');
}

/** The numbered files of `dir`, by version; two files with one number are refused. */
export function readMigrations(dir: string): Migration[] {
  const migrations = readdirSync(dir)
    .map((file) => ({ file, match: FILE_NAME.exec(file) }))
    .filter((entry): entry is { file: string; match: RegExpExecArray } => entry.match !== null)
    .map(({ file, match }) => {
      const sql = withoutBom(readFileSync(`${dir}/${file}`, 'utf8'));
      return { version: Number(match[1]), name: match[2]!, sql, checksum: checksumOf(sql) };
    })
    .sort((a, b) => a.version - b.version);
  migrations.forEach((m, i) => {
    if (i > 0 && migrations[i - 1]!.version === m.version) throw new Error(`two migrations numbered ${m.version} in ${dir}`);
  });
  return migrations;
}

/** The migrations this release ships. */
export const MIGRATIONS: readonly Migration[] = readMigrations(SQL_DIR);

/** The schema version this release's programs need: the highest migration shipped. */
export const REQUIRED_VERSION = MIGRATIONS.at(-1)?.version ?? 0;
