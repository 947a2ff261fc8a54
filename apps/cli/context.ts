import type { CliConfig } from './config.js';

/** What a command needs from its surroundings, passed in so that commands never reach for globals. */
export interface CliContext {
  config: CliConfig;
  stdout: NodeJS.WritableStream;
  /** Progress and notes for people; `isTTY` decides between a live bar and plain lines. */
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
}

export function writeLine(stream: NodeJS.WritableStream, line = ''): void {
  stream.write(`${line}\n`);
}
