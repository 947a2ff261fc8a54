import { Command } from 'commander';
import { parseDuration, parseEnv, withDevDefaults } from '../../libs/config/index.js';
import { isWellFormedReference, merchantIdSchema } from '../../libs/contracts/index.js';
import { isStorableTime } from '../../libs/delivery-store/index.js';
import { NamedError } from '../../libs/runtime/index.js';
import { type CliConfig, cliEnvSchema } from './config.js';

/** What the program is given, so that commands never reach for globals, and the exit code a command leaves. */
export interface CliIo {
  env: Record<string, string | undefined>;
  stdout: NodeJS.WritableStream;
  /** `isTTY` decides between a live progress bar and plain lines. */
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
  now(): Date;
  exitCode: number;
  /** Where SIGINT (Ctrl-C) is heard; absent: never. */
  interrupts?: Pick<NodeJS.EventEmitter, 'once' | 'off'>;
}

export type CliContext = Pick<CliIo, 'env' | 'stdout' | 'stderr'> & {
  /** Parsed on first use, so that a command that needs no broker (token) is not stopped by its settings. */
  readonly config: CliConfig;
  /** `run` with a signal the first Ctrl-C aborts, to stop after the thing in hand; a second one ends the process. */
  interruptible<T>(run: (interrupted: AbortSignal) => Promise<T>): Promise<T>;
};

/** The exit code of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports a process the signal ended). */
export const INTERRUPTED = 130;

/** The command line was wrong: the message and the command's help are printed, exit 2. */
export class UsageError extends NamedError {}

/** The command ran but found nothing to show or act on: exit 3, so scripts can tell it from a failure. */
export class NothingMatchedError extends NamedError {}

/** Development mode (WEBHOOKS_DEV=true) brings the programs' defaults, so a command accepts what they accept. */
function contextOf(io: CliIo): CliContext {
  const { env } = withDevDefaults(io.env);
  let config: CliConfig | undefined;
  return {
    env,
    stdout: io.stdout,
    stderr: io.stderr,
    get config() {
      return (config ??= parseEnv(cliEnvSchema, env));
    },
    async interruptible(run) {
      const controller = new AbortController();
      const stop = () => controller.abort();
      io.interrupts?.once('SIGINT', stop);
      try {
        return await run(controller.signal);
      } finally {
        io.interrupts?.off('SIGINT', stop);
      }
    },
  };
}

export class CliCommand extends Command {
  constructor(
    private readonly io: CliIo,
    name?: string,
  ) {
    super(name);
  }

  override createCommand(name?: string): CliCommand {
    return new CliCommand(this.io, name);
  }

  /** `check` refuses what commander cannot; `run` gets the environment, parsed only now so --help needs none. */
  handle<Raw, T>(check: (raw: Raw, args: string[], now: Date) => T, run: (options: T, ctx: CliContext) => Promise<number | void>): this {
    return this.action(async () => {
      try {
        const options = check(this.opts<Raw & Record<string, unknown>>(), this.processedArgs as string[], this.io.now());
        this.io.exitCode = (await run(options, contextOf(this.io))) ?? 0;
      } catch (err) {
        if (err instanceof UsageError) this.error(err.message, { exitCode: 2, code: 'webhooks.usage' });
        throw err;
      }
    });
  }
}

export function writeLine(stream: NodeJS.WritableStream, line: string): void {
  stream.write(`${line}\n`);
}

// Control characters from message headers and bodies must not move the cursor or break a row.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;

function printable(text: string): string {
  return text.replace(CONTROL, (c) => (c === '\n' ? '\\n' : c === '\t' ? '\\t' : c === '\r' ? '\\r' : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`));
}

export function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** Columns padded to their widest cell; the last one is left ragged so long text does not pad every row. */
export function formatTable(header: string[], rows: string[][]): string {
  const cells = [header, ...rows].map((row) => row.map((cell) => printable(cell)));
  const widths = header.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? '').length)));
  return cells
    .map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ').trimEnd())
    .join('\n');
}

/** Scripts get a JSON array even when it is empty; the exit code says whether anything matched. */
export function printListing(ctx: CliContext, json: boolean, items: unknown[], nothing: string, table: () => string): void {
  if (json) writeLine(ctx.stdout, JSON.stringify(items));
  if (items.length === 0) throw new NothingMatchedError(nothing);
  if (!json) writeLine(ctx.stdout, table());
}

export const TIME = `Times are ISO-8601 (2026-05-01T10:00:00Z; UTC when no offset is given) or a duration meaning
"that long ago" (30m, 2h, 7d).`;

export const EXIT = `Exit codes: 0 done, 1 failed (broker unreachable, queue missing), 2 usage error, 3 nothing matched, ${INTERRUPTED} interrupted (Ctrl-C).`;

export const ENVIRONMENT = `Environment: RABBITMQ_URL, and TOPOLOGY_PREFIX (default webhooks): give the one the programs run
with (export it in every terminal), or the commands look at another topology. token reads
AUTH_JWT_SECRET (the development secret with WEBHOOKS_DEV=true), AUTH_JWT_ISSUER and AUTH_JWT_AUDIENCE.`;

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/i;

/** A time PostgreSQL holds (years 0001 to 9999), or the query would fail rather than the command line. */
function storable(option: string, text: string, at: Date): Date {
  if (!Number.isNaN(at.getTime()) && isStorableTime(at.toISOString())) return at;
  throw new UsageError(`--${option}: ${text} is outside the years 0001 to 9999`);
}

/** An ISO-8601 time (UTC without an offset) or a duration ago; 2026-02-30 or 24:10 is refused, not rolled over. */
function parseTime(option: string, text: string, now: Date): Date {
  const trimmed = text.trim();
  const ago = parseDuration(trimmed);
  if (ago !== undefined) return storable(option, trimmed, new Date(now.getTime() - ago));
  const match = ISO_TIME.exec(trimmed);
  if (match) {
    const [, year, month, day, hour = '0', minute = '0', second = '0'] = match;
    const calendar = new Date(Date.UTC(Number(year), Number(month) - 1, Number(day)));
    if (calendar.getUTCMonth() !== Number(month) - 1 || calendar.getUTCDate() !== Number(day)) {
      throw new UsageError(`--${option}: ${year}-${month}-${day} is not a date (month 01 to 12, and no day past the month's last)`);
    }
    if (Number(hour) > 23 || Number(minute) > 59 || Number(second) > 59) {
      throw new UsageError(`--${option}: ${hour}:${minute}:${second} is not a time of day (hours 00 to 23, minutes and seconds 00 to 59)`);
    }
    let iso = trimmed.replace(' ', 'T');
    if (iso.includes('T') && match[7] === undefined) iso += 'Z';
    const ms = Date.parse(iso);
    if (Number.isFinite(ms)) return storable(option, trimmed, new Date(ms));
  }
  throw new UsageError(`--${option} takes an ISO-8601 time (e.g. 2026-05-01T10:00:00Z) or a duration ago (e.g. 30m, 2h, 7d), not "${text}"`);
}

export function parseWindow(raw: { since?: string; until?: string }, now: Date): { since?: Date; until?: Date } {
  const since = raw.since === undefined ? undefined : parseTime('since', raw.since, now);
  const until = raw.until === undefined ? undefined : parseTime('until', raw.until, now);
  if (since && until && since >= until) throw new UsageError('--since must be before --until');
  return { since, until };
}

/** A whole number from 1 to `max`, else the usage error `refused`. */
export function wholeNumber(text: string, max: number, refused: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < 1 || n > max) throw new UsageError(refused);
  return n;
}

export function parseLimit(text: string, max = 1_000_000): number {
  return wholeNumber(text, max, `--limit takes a whole number from 1 to ${max}`);
}

/** The rule of the resend API: a reference it can look up, given exactly as it was published. */
export function checkReference(text: string): string {
  if (!isWellFormedReference(text)) throw new UsageError('a reference is 1 to 200 characters without control characters or a lone surrogate');
  return text;
}

/** An endpoint id as the API takes it. */
export function checkEndpointId(text: string): string {
  if (text.length === 0 || text.length > 200 || text.includes('\u0000')) throw new UsageError('--endpoint takes an endpoint id (ep_…) of 1 to 200 characters');
  return text;
}

/** --merchant where the command passes it to the API, which takes only a well-formed id. */
export function checkMerchantId(text: string | undefined): string {
  if (!merchantIdSchema.safeParse(text).success) throw new UsageError('--merchant takes a merchant id (letters, digits, ".", "_", ":", "-")');
  return text!;
}

export function requireMerchant(value: string | undefined, command: string): string {
  if (value === undefined || value.trim() === '') throw new UsageError(`${command} needs --merchant <id>`);
  if (value.length > 200) throw new UsageError('--merchant takes an id of at most 200 characters');
  return value;
}
