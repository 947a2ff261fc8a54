/**
 * Retry-After as milliseconds from now: delay-seconds or an HTTP date; undefined when absent or
 * unreadable. An HTTP date is on the server's clock, so it counts from the response's own `date`
 * (RFC 9110 §10.2.3): read against `now`, this host's clock, a server minutes behind asked for no
 * wait at all and one minutes ahead for the schedule's last step. Without a readable `date`, `now`.
 */
export function retryAfterMs(value: string | undefined, now: Date, date?: string): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  const sent = date === undefined ? Number.NaN : Date.parse(date);
  return Math.max(0, at - (Number.isNaN(sent) ? now.getTime() : sent));
}
