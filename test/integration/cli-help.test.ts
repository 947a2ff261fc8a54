import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { createProgram } from '../../apps/cli/program.js';
import { INVALID_CODES } from '../../libs/contracts/index.js';

/** Every command that runs something, with its words after `webhooks` (e.g. "merchants set"). */
function leaves(command: Command, path: string[] = []): Array<{ path: string; command: Command }> {
  const subcommands = command.commands.filter((c) => c.name() !== 'help');
  if (subcommands.length === 0) return [{ path: path.join(' '), command }];
  return subcommands.flatMap((c) => leaves(c, [...path, c.name()]));
}

/**
 * The operators' guide names every command and sends the reader to docs/cli.md for its options,
 * which cli-reference.test.ts keeps equal to this help: the options are written down once.
 */
describe('the CLI help and the operators\' guide say the same', () => {
  const sink = { write: () => true } as unknown as NodeJS.WritableStream;
  const program = createProgram({ env: {}, stdout: sink, stderr: sink, now: () => new Date(), exitCode: 0 });
  const guide = readFileSync('docs/operating.md', 'utf8');
  /** A "## " section of the guide, up to the next one. */
  const section = (heading: string) => {
    const start = guide.indexOf(`\n## ${heading}\n`);
    if (start < 0) throw new Error(`docs/operating.md has no section "${heading}"`);
    const end = guide.indexOf('\n## ', start + 1);
    return guide.slice(start, end < 0 ? undefined : end);
  };
  const synopsis = section('Operator CLI');

  it.each(leaves(program).map((leaf) => [leaf.path] as const))('the operators\' guide names %s, and cli.md for its options', (path) => {
    expect(synopsis).toMatch(new RegExp(`\`webhooks ${path}( [^\`]*)?\``));
    expect(synopsis).toContain('[cli.md](cli.md)');
  });

  it('the operators\' guide lists every parking code the CLI knows', () => {
    const queues = section('Operating the queues');
    for (const code of INVALID_CODES) expect(queues).toContain(`\`${code}\``);
  });
});
