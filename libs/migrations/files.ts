import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** One numbered SQL file: `NNNN_name.sql`, applied in version order, each in one transaction. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** A file changed after it ran is refused (a change is a new file). */
  checksum: string;
  /** Its `-- runs with releases from: NNNN` line: the oldest schema version whose programs work with it applied. */
  runsWithFrom?: number;
}

/** tsc does not copy .sql files to dist/: the built module reads the package's libs/migrations/sql. */
export const SQL_DIR = [new URL('./sql/', import.meta.url), new URL('../../../libs/migrations/sql/', import.meta.url)]
  .map((url) => fileURLToPath(url))
  .find((dir) => existsSync(dir))!;

const FILE_NAME = /^(\d{4})_([a-z0-9_]+)\.sql$/;
/** The declaration, exactly; a comment line that only starts like it (LOOKS_DECLARED) is refused, never read as none. */
const DECLARATION = /^-- runs with releases from: (\d{4})$/;
const LOOKS_DECLARED = /^\s*--\s*runs?\s+with\b/i;
export const DECLARATION_SYNTAX = '-- runs with releases from: NNNN';

/** sha256 of the text with CRLF read as LF: a checkout with CRLF endings is the same migration. */
export function checksumOf(sql: string): string {
  return createHash('sha256').update(sql.replace(/\r\n/g, '\n')).digest('hex');
}

/** The declaration in the file's opening comment, read strictly: a malformed, second, misplaced or too new one throws. */
function runsWithFromOf(file: string, version: number, sql: string): number | undefined {
  const refuse = (why: string) => new Error(`migration ${file}: ${why}; write "${DECLARATION_SYNTAX}" in its opening comment (the oldest schema version whose programs run on the schema with it), or nothing if only releases that know it may run`);
  let found: number | undefined;
  let opening = true;
  for (const raw of sql.split('\n')) {
    const line = raw.replace(/\r$/, '');
    if (opening && line.trim() !== '' && !line.trimStart().startsWith('--')) opening = false;
    if (!LOOKS_DECLARED.test(line)) continue;
    const match = DECLARATION.exec(line);
    if (!match) throw refuse(`malformed declaration "${line.trim()}"`);
    if (!opening) throw refuse(`the declaration "${line}" is below the file's opening comment`);
    if (found !== undefined) throw refuse('it declares twice');
    found = Number(match[1]);
    if (found >= version) throw refuse(`it declares releases from ${found}, not older than the migration itself`);
  }
  return found;
}

export function migrationOf(file: string, sql: string): Migration {
  const match = FILE_NAME.exec(file);
  if (!match) throw new Error(`migration file name ${file} is not NNNN_name.sql`);
  const version = Number(match[1]);
  const runsWithFrom = runsWithFromOf(file, version, sql);
  return { version, name: match[2]!, sql, checksum: checksumOf(sql), ...(runsWithFrom === undefined ? {} : { runsWithFrom }) };
}

/** The migrations of a folder, by version; two files with one number are refused. */
export function readMigrations(dir: string): Migration[] {
  const migrations = readdirSync(dir)
    .filter((file) => FILE_NAME.test(file))
    // A UTF-8 byte order mark (some Windows editors write one) is no part of the SQL: PostgreSQL would read it as a word.
    .map((file) => migrationOf(file, readFileSync(`${dir}/${file}`, 'utf8').replace(/^\uFEFF/, '')))
    .sort((a, b) => a.version - b.version);
  migrations.forEach((m, i) => {
    if (i > 0 && migrations[i - 1]!.version === m.version) throw new Error(`two migrations numbered ${m.version} in ${dir}`);
  });
  return migrations;
}

export const MIGRATIONS: readonly Migration[] = readMigrations(SQL_DIR);

/** The schema version this release's programs need: the highest migration shipped. */
export const REQUIRED_VERSION = MIGRATIONS.at(-1)?.version ?? 0;
