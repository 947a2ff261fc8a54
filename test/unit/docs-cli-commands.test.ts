import type { Command } from 'commander';
import { createProgram } from '../../apps/cli/program.js';
import { codeBlocks, codeSpans, documents, lineOf } from '../support/docs.js';

/**
 * Every CLI call the guides write (`npm run cli -- …`, `npx webhooks …`, `webhooks …` in a code
 * block or a code span) names a command the CLI has and only options that command takes (with
 * those it requires, when written with any), so a reader who copies one gets the command's own
 * answer, not "unknown option" or "required option … not specified". docs/cli.md is
 * generated from the CLI (cli-reference.test.ts) and not read here; the shared DESIGN.md is.
 */
// `webhooks` bare only where a command starts (a line, a span, `$(`, after `NAME=value`): prose and
// diagrams say "webhooks" too.
const CALL = /(?:\bnpm run(?: -s)? cli --|\bnpx webhooks|(?:^\s*|\$\(|[A-Z_]+=\S*\s+|&&\s*)webhooks)\s+([a-z][^`\n|;)>]*)/g;

function words(text: string): string[] {
  return [...text.matchAll(/"[^"]*"|'[^']*'|\S+/g)].map((m) => m[0]);
}

interface Call {
  where: string;
  args: string[];
}

function calls(): Call[] {
  const found: Call[] = [];
  for (const { file, text } of documents().filter((d) => d.file !== 'docs/cli.md')) {
    for (const { at, body } of [...codeBlocks(text), ...codeSpans(text)]) {
      // A line ending in a backslash goes on on the next: one call.
      for (const line of body.split(/(?<!\\)\n/)) {
        const code = line.split('\n').map((part) => part.replace(/\s#.*$/, '').replace(/\\$/, '')).join(' ');
        for (const m of code.matchAll(CALL)) {
          found.push({ where: `${file}:${lineOf(text, at + body.indexOf(line))}`, args: words(m[1]!) });
        }
      }
    }
  }
  return found;
}

/** What is wrong with one call, or undefined: its command path, then each option against that command's. */
function check(root: Command, args: string[]): string | undefined {
  let command = root;
  let i = 0;
  for (; i < args.length; i++) {
    const sub = command.commands.find((c) => c.name() === args[i] || c.aliases().includes(args[i]!));
    if (!sub) break;
    command = sub;
  }
  if (command === root) return `no command "${args[0]}"`;
  // A command with subcommands and no action of its own needs one of them (`webhooks failed` alone prints help).
  if (command.commands.length > 0 && i < args.length && !args[i]!.startsWith('-')) return `no command "${args[i]}" under "${command.name()}"`;
  const known = new Set(command.options.flatMap((o) => [o.long, o.short]).filter(Boolean) as string[]);
  known.add('--help').add('-h');
  for (const word of args.slice(i)) {
    if (!word.startsWith('-') || word === '-' || word === '--') continue;
    const flag = word.split('=')[0]!;
    if (!known.has(flag)) return `"${command.name()}" has no option ${flag}`;
  }
  // Written with options, a call is one to copy: it must carry those the command requires (`log
  // --endpoint <id>` alone answers "required option '--merchant <id>' not specified"). A bare
  // `webhooks log` names the command in prose.
  const given = new Set(args.slice(i).map((word) => word.split('=')[0]!));
  const missing = args.length > i ? command.options.filter((o) => o.mandatory && !given.has(o.long!) && !given.has(o.short!)) : [];
  if (missing.length > 0) return `"${command.name()}" requires ${missing.map((o) => o.long).join(', ')}`;
  return undefined;
}

describe('the CLI calls the guides write', () => {
  const program = createProgram({
    env: {},
    stdout: { write: () => true } as unknown as NodeJS.WritableStream,
    stderr: { write: () => true } as unknown as NodeJS.WritableStream,
    now: () => new Date(0),
    exitCode: 0,
  });
  const found = calls();

  it('are found in the guides (operating.md, the README walkthrough, the production guide)', () => {
    const files = new Set(found.map((c) => c.where.split(':')[0]));
    for (const file of ['README.md', 'docs/operating.md', 'docs/production.md']) expect(files).toContain(file);
    expect(found.length).toBeGreaterThan(30);
  });

  it('name a command the CLI has, with only options that command takes, and those it requires', () => {
    const wrong = found.map((c) => ({ ...c, error: check(program, c.args) })).filter((c) => c.error).map((c) => `${c.where}: webhooks ${c.args.join(' ')}: ${c.error}`);
    expect(wrong).toEqual([]);
  });
});
