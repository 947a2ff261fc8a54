import type { Command } from 'commander';
import { type CliContext, type CliIo, contextOf } from './context.js';
import { UsageError } from './errors.js';

/**
 * The action of a declared command. Commander has parsed the line against the declaration (unknown
 * options, missing values, conflicts); `check` turns what it parsed into the command's options and
 * throws a UsageError for what a declaration cannot say (a time that does not exist, a code that is
 * not one). Then `run` gets the environment, parsed only now so that --help and usage errors need
 * none. A UsageError from either is printed with this command's help and exits 2.
 */
export function action<Raw, T>(
  io: CliIo,
  check: (raw: Raw, args: string[], now: Date) => T,
  run: (options: T, ctx: CliContext) => Promise<number>,
): (...received: unknown[]) => Promise<void> {
  return async (...received) => {
    const command = received.at(-1) as Command;
    try {
      const options = check(command.opts<Raw & Record<string, unknown>>(), command.processedArgs as string[], io.now());
      io.exitCode = await run(options, contextOf(io));
    } catch (err) {
      if (err instanceof UsageError) command.error(err.message, { exitCode: 2, code: 'webhooks.usage' });
      throw err;
    }
  };
}
