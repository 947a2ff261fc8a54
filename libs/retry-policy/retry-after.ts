/** The three forms of an HTTP-date (RFC 9110 §5.6.7), any case: Date.parse reads 'Retry in 2099' as a date. */
const HTTP_DATE = [
  /^[a-z]{3}, \d{2} [a-z]{3} \d{4} \d{2}:\d{2}:\d{2} gmt$/i,
  /^[a-z]{6,9}, \d{2}-[a-z]{3}-\d{2} \d{2}:\d{2}:\d{2} gmt$/i,
  /^[a-z]{3} [a-z]{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/i,
];

/** NaN when it is none (asctime-date carries no zone: it is GMT). */
function httpDate(text: string): number {
  if (!HTTP_DATE.some((form) => form.test(text))) return Number.NaN;
  return Date.parse(HTTP_DATE[2]!.test(text) ? `${text} GMT` : text);
}

/** An HTTP date is on the server's clock: it counts from the response's own `date` (RFC 9110 §10.2.3), else `now`. */
export function retryAfterMs(value: string | undefined, now: Date, date?: string): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = httpDate(text);
  if (Number.isNaN(at)) return undefined;
  const sent = date === undefined ? Number.NaN : httpDate(date.trim());
  return Math.max(0, at - (Number.isNaN(sent) ? now.getTime() : sent));
}
