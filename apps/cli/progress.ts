import cliProgress from 'cli-progress';
import { type CliIo, writeLine } from './command.js';

/** A live bar at a terminal; in a log or a pipe, whose redraws would fill with escape codes, a line per tenth of `total` (above 0). */
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
