const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;

/** Parses `200ms`, `5s`, `5m`, `2h`, `1d` into milliseconds; returns undefined when it is not one. */
export function parseDuration(text: string): number | undefined {
  const match = DURATION.exec(text.trim());
  if (!match) return undefined;
  const ms = Math.round(Number(match[1]) * UNIT_MS[match[2]!]!);
  return Number.isFinite(ms) ? ms : undefined;
}

/** The longest duration a variable takes, 100 years: a time computed from a longer one may not fit PostgreSQL. */
export const LONGEST_DURATION = '36500d';
