import { LONGEST_DURATION, parseDuration } from '../config/durations.js';

/** RETRY_SCHEDULE: comma-separated delays above zero, one per retry; empty means a single attempt. The delays in ms, or the problem. */
export function parseRetrySchedule(text: string): { delays: number[] } | { problem: string } {
  if (text.trim() === '') return { delays: [] };
  const parts = text.split(',').map((p) => p.trim());
  const delays: number[] = [];
  for (const [i, part] of parts.entries()) {
    const which = `delay ${i + 1} of ${parts.length}`;
    if (part === '') {
      return { problem: `${which} is empty (two commas in a row, or a comma at an end); give a duration for every retry, e.g. 5s,5m,30m, or leave RETRY_SCHEDULE empty for a single attempt` };
    }
    const ms = parseDuration(part);
    if (ms === undefined) {
      return { problem: `"${part}" is not a duration (${which}): give a number and a unit among ms, s, m, h, d (e.g. 200ms, 5s, 5m, 2h, 1d)` };
    }
    if (ms < 1) {
      return { problem: `${which} is zero ("${part}"): every delay must be at least 1ms, because a zero delay retries at once; for a single attempt leave RETRY_SCHEDULE empty` };
    }
    if (ms > parseDuration(LONGEST_DURATION)!) {
      return { problem: `${which} ("${part}") is longer than the most allowed, ${LONGEST_DURATION}` };
    }
    delays.push(ms);
  }
  return { delays };
}
