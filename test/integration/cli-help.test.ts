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

describe('the CLI help and the operators\' guide say the same', () => {
  const sink = { write: () => true } as unknown as NodeJS.WritableStream;
  const program = createProgram({ env: {}, stdout: sink, stderr: sink, now: () => new Date(), exitCode: 0 });
  const readme = readFileSync('docs/operating.md', 'utf8');
  const synopsis = readme.slice(readme.indexOf('### Operator CLI'), readme.indexOf('### Metrics and health'));

  it.each(leaves(program).map((leaf) => [leaf.path, leaf.command] as const))('the operators\' guide lists every option of %s', (path, command) => {
    const lines = synopsis.split('\n').filter((line) => line.startsWith(`webhooks ${path} `) || line === `webhooks ${path}`);
    expect(lines.length).toBeGreaterThan(0);
    for (const option of command.options) expect(lines.join('\n')).toContain(option.long!);
  });

  it('the operators\' guide lists every parking code the CLI knows', () => {
    for (const code of INVALID_CODES) expect(synopsis).toContain(`\`${code}\``);
  });
});
