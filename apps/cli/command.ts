import type { CliContext } from './context.js';

/** A command: parsing needs no environment (so --help and usage errors work anywhere), running does. */
export interface Command<T> {
  usage: string;
  /** The options, or 'help' when -h/--help was given; throws UsageError. */
  parse(args: string[], now: Date): T | 'help';
  /** The exit code; throws NothingMatchedError (3), UsageError (2) or anything else (1). */
  run(options: T, ctx: CliContext): Promise<number>;
}
