/**
 * A migration's `-- runs with releases from: NNNN` line: read strictly when the files are loaded,
 * so that a line meant as a declaration but written otherwise stops every program and `migrate`
 * naming the file, instead of being read as no declaration (or as a wrong one).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MIGRATIONS, migrationOf, readMigrations } from '../../libs/migrations/index.js';

describe("a migration's declaration of the releases it runs with", () => {
  it('reads the line from the opening comment; none: only releases that know it', () => {
    expect(migrationOf('0030_wide.sql', '-- Adds a nullable column.\n-- runs with releases from: 0023\nALTER TABLE t ADD COLUMN c text;\n')).toMatchObject({ version: 30, name: 'wide', runsWithFrom: 23 });
    expect(migrationOf('0030_wide.sql', '-- runs with releases from: 0000\r\nCREATE TABLE t (a int);\r\n').runsWithFrom).toBe(0);
    expect(migrationOf('0030_narrow.sql', '-- Renames a column.\nALTER TABLE t RENAME COLUMN a TO b;\n').runsWithFrom).toBeUndefined();
  });

  it.each([
    ['-- runs with releases from 0023', 'malformed'],
    ['-- runs with releases from: 23', 'malformed'],
    ['-- Runs with releases from: 0023', 'malformed'],
    ['-- runs with releases from: 0023, 0024', 'malformed'],
    ['--runs with release from: 0023', 'malformed'],
    ['-- runs with releases from: 0030', 'not older than the migration itself'],
    ['-- runs with releases from: 0031', 'not older than the migration itself'],
    ['-- runs with releases from: 0023\n-- runs with releases from: 0022', 'declares twice'],
  ])('refuses %j, naming the file (%s)', (line, why) => {
    expect(() => migrationOf('0030_wide.sql', `-- A column.\n${line}\nALTER TABLE t ADD COLUMN c text;\n`)).toThrow(new RegExp(`^migration 0030_wide\\.sql: .*${why}`));
  });

  it('refuses a declaration below the opening comment, where it reads as part of the SQL', () => {
    expect(() => migrationOf('0030_wide.sql', 'ALTER TABLE t ADD COLUMN c text;\n-- runs with releases from: 0023\n')).toThrow(
      /^migration 0030_wide\.sql: the declaration "-- runs with releases from: 0023" is below the file's opening comment/,
    );
  });

  it('stops the load of a folder with a malformed declaration, naming the file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'migrations-'));
    try {
      writeFileSync(join(dir, '0001_first.sql'), 'CREATE TABLE t (a int);\n');
      writeFileSync(join(dir, '0002_second.sql'), '-- runs with releases from: one\nALTER TABLE t ADD COLUMN b int;\n');
      expect(() => readMigrations(dir)).toThrow(/^migration 0002_second\.sql: malformed declaration "-- runs with releases from: one"/);
      writeFileSync(join(dir, '0002_second.sql'), '-- runs with releases from: 0001\nALTER TABLE t ADD COLUMN b int;\n');
      expect(readMigrations(dir).map((m) => [m.version, m.runsWithFrom])).toEqual([[1, undefined], [2, 1]]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('leaves the files released before it undeclared (their checksums are recorded), and 0025 declares', () => {
    expect(MIGRATIONS.filter((m) => m.version < 25).map((m) => m.runsWithFrom).filter((v) => v !== undefined)).toEqual([]);
    expect(MIGRATIONS.find((m) => m.version === 25)?.runsWithFrom).toBe(24);
  });
});
