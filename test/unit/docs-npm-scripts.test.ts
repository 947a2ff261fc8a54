import { readFileSync } from 'node:fs';
import { documents, lineOf } from '../support/docs.js';

/**
 * Every npm command the docs write (`npm run <script>`, `npm start`, `npm test`) names a script of
 * package.json: a renamed or removed script fails here, not in a reader's terminal. Whether the
 * `start` commands run as written is test/integration/docs-start-commands.test.ts.
 */
describe('npm commands in the docs', () => {
  const scripts = Object.keys((JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts);

  it('name scripts that package.json has', () => {
    const written: string[] = [];
    const missing: string[] = [];
    for (const { file, text } of documents()) {
      for (const m of text.matchAll(/\bnpm (?:run(?: +-{1,2}[a-z]+)* +([a-z][\w:.-]*)|(start|test)\b)/g)) {
        const script = (m[1] ?? m[2])!;
        written.push(script);
        if (!scripts.includes(script)) missing.push(`${file}:${lineOf(text, m.index)}: npm ${m[1] ? 'run ' : ''}${script}`);
      }
    }
    expect(written.length).toBeGreaterThan(20);
    expect(missing).toEqual([]);
  });
});
