import { withDevDefaults } from '../../libs/config/index.js';
import { type CliConfig, loadCliConfig } from './config.js';

/** What the program is given: its environment and streams, and the exit code a command leaves. */
export interface CliIo {
  env: Record<string, string | undefined>;
  stdout: NodeJS.WritableStream;
  /** Progress and notes for people; `isTTY` decides between a live bar and plain lines. */
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
  now(): Date;
  exitCode: number;
}

/** What a command needs from its surroundings, passed in so that commands never reach for globals. */
export interface CliContext {
  /** Parsed on first use, so that a command that needs no broker (token) is not stopped by its settings. */
  readonly config: CliConfig;
  env: Record<string, string | undefined>;
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
}

/**
 * Development mode (WEBHOOKS_DEV=true, never NODE_ENV) brings the same defaults as in the
 * API and the dispatcher (http and loopback webhook URLs, the development token secret), so a
 * command accepts what the programs it talks to accept.
 */
export function contextOf(io: CliIo): CliContext {
  const { env } = withDevDefaults(io.env);
  let config: CliConfig | undefined;
  return {
    env,
    stdout: io.stdout,
    stderr: io.stderr,
    get config() {
      return (config ??= loadCliConfig(env));
    },
  };
}

export function writeLine(stream: NodeJS.WritableStream, line = ''): void {
  stream.write(`${line}\n`);
}
