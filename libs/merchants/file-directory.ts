import { readFileSync, statSync } from 'node:fs';
import type { Logger } from '../logger/index.js';
import { Periodic } from '../runtime/periodic.js';
import type { MerchantDirectory } from './directory.js';
import { type Merchant, merchantsFileSchema } from './schema.js';
import { NamedError } from '../runtime/named-error.js';

export class MerchantsFileError extends NamedError {
  constructor(readonly path: string, detail: string) {
    super(`MERCHANTS_FILE ${path}: ${detail}`);
  }
}

function load(path: string): Merchant[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new MerchantsFileError(path, `cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new MerchantsFileError(path, `is not JSON (${syntaxErrorAt(text, (err as Error).message)})`);
  }
  const parsed = merchantsFileSchema.safeParse(json);
  if (!parsed.success) {
    // Issue paths and messages only: never echo values, they hold secrets.
    const issue = parsed.error.issues[0]!;
    throw new MerchantsFileError(path, `${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return parsed.data.merchants;
}

/**
 * Where JSON.parse stopped, never its own message: V8 quotes the text around some errors
 * (`..."secret":whsec_c2Vj"...`), and next to a secret that is part of it. Those name no position.
 */
function syntaxErrorAt(text: string, message: string): string {
  const at = /at position (\d+)/.exec(message)?.[1];
  if (at === undefined) return 'a syntax error; jq . <file> shows where';
  const before = text.slice(0, Number(at)).split('\n');
  return `a syntax error at line ${before.length}, column ${before[before.length - 1]!.length + 1}`;
}

/**
 * The merchants of a JSON file, validated at start-up and reloaded when the file changes. A new
 * file that does not validate is refused with a log line and the last good one stays in force.
 */
export class FileMerchantDirectory implements MerchantDirectory {
  private byIdMap = new Map<string, Merchant>();
  private byKeyMap = new Map<string, Merchant>();
  private polls?: Periodic;
  /** mtime and size of the file last read, good or not, so a bad file is reported once. */
  private seen = '';

  constructor(private readonly path: string, private readonly logger: Logger) {
    this.seen = this.signature();
    this.replace(load(path));
  }

  /** Polls mtime and size against what was last read: works with tools that replace the file, misses nothing since loading. */
  watch(intervalMs = 1_000): this {
    this.polls ??= new Periodic(() => {
      // Missing for a moment while being replaced: the next poll sees the new file.
      const now = this.signature();
      if (now !== '' && now !== this.seen) this.reload();
    }, () => intervalMs, { waitFirst: true });
    void this.polls.start();
    return this;
  }

  private signature(): string {
    try {
      const s = statSync(this.path);
      return `${s.mtimeMs}:${s.size}`;
    } catch {
      return '';
    }
  }

  reload(): boolean {
    this.seen = this.signature();
    try {
      const merchants = load(this.path);
      this.replace(merchants);
      this.logger.info('merchants reloaded', { merchants: merchants.length });
      return true;
    } catch (err) {
      this.logger.error('merchants file refused, keeping the previous one', { error: (err as Error).message });
      return false;
    }
  }

  private replace(merchants: Merchant[]): void {
    this.byIdMap = new Map(merchants.map((m) => [m.id, m]));
    this.byKeyMap = new Map(merchants.map((m) => [m.publicKey, m]));
  }

  byId(id: string): Merchant | undefined {
    return this.byIdMap.get(id);
  }

  byPublicKey(publicKey: string): Merchant | undefined {
    return this.byKeyMap.get(publicKey);
  }

  list(): Merchant[] {
    return [...this.byIdMap.values()];
  }

  async close(): Promise<void> {
    await this.polls?.stop();
  }
}
