import cliProgress from 'cli-progress';
import { type CliIo, writeLine } from './command.js';

/**
 * A live bar for a person at a terminal; for a log or a pipe, one plain line each time another
 * tenth of `total` (above 0) is done, because a bar's redraws would fill the log with escape codes.
 */
export function startProgress(label: string, total: number, stderr: CliIo['stderr']): { advance(): void; stop(): void } {
  if (stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      { stream: stderr, format: `${label} [{bar}] {percentage}% | {value}/{total} | ETA {eta_formatted}`, hideCursor: true },
      cliProgress.Presets.shades_classic,
    );
    bar.start(total, 0);
    return { advance: () => bar.increment(1), stop: () => bar.stop() };
  }
  let done = 0;
  let tenthsReported = 0;
  return {
    advance() {
      done = Math.min(total, done + 1);
      const tenths = Math.floor((done * 10) / total);
      if (tenths <= tenthsReported) return;
      tenthsReported = tenths;
      writeLine(stderr, `${label}: ${Math.floor((done * 100) / total)}% (${done}/${total})`);
    },
    stop() {},
  };
}
