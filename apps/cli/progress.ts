import cliProgress from 'cli-progress';
import { writeLine } from './context.js';

export interface Progress {
  advance(count: number): void;
  stop(): void;
}

/**
 * A live bar for a person at a terminal; for a log or a pipe, one plain line each time another
 * tenth is done, because a bar's redraws would fill the log with escape codes.
 */
export function startProgress(label: string, total: number, stderr: NodeJS.WritableStream & { isTTY?: boolean }): Progress {
  if (stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      { stream: stderr, format: `${label} [{bar}] {percentage}% | {value}/{total} | ETA {eta_formatted}`, hideCursor: true },
      cliProgress.Presets.shades_classic,
    );
    bar.start(total, 0);
    return { advance: (count) => bar.increment(count), stop: () => bar.stop() };
  }
  let done = 0;
  let tenthsReported = 0;
  return {
    advance(count) {
      done = Math.min(total, done + count);
      const tenths = total === 0 ? 10 : Math.floor((done * 10) / total);
      if (tenths <= tenthsReported) return;
      tenthsReported = tenths;
      writeLine(stderr, `${label}: ${total === 0 ? 100 : Math.floor((done * 100) / total)}% (${done}/${total})`);
    },
    stop() {},
  };
}
