/** Times a delivery is set aside for a busy endpoint before it waits for a slot instead. */
export const MAX_DEFERRALS = 20;

/** It only ever picks a step of the schedule: it never invents a delay. */
export class RetryPolicy {
  /** One delay per retry step (RETRY_SCHEDULE); empty: a single attempt. */
  readonly delaysMs: readonly number[];
  /** The schedule's total span: how long a webhook may wait, postponements included, before it fails. */
  readonly spanMs: number;
  private readonly maxDeferrals: number;

  constructor(settings: { delaysMs: readonly number[]; maxDeferrals?: number }) {
    this.delaysMs = settings.delaysMs;
    this.spanMs = settings.delaysMs.reduce((sum, delay) => sum + delay, 0);
    this.maxDeferrals = settings.maxDeferrals ?? MAX_DEFERRALS;
  }

  /** True once every attempt of the schedule was made: `attempt` counts from 1. */
  exhausted(attempt: number): boolean {
    return attempt - 1 >= this.delaysMs.length;
  }

  /** Always with a single attempt: a clock behind the one that stamped `startedAt` found a span of 0 not over. */
  spanOver(startedAt: string, now: Date): boolean {
    return this.delaysMs.length === 0 || this.spanLeftMs(startedAt, now) <= 0;
  }

  /** Time left until that span is over (≤ 0 once it is). */
  spanLeftMs(startedAt: string, now: Date): number {
    return this.spanMs - (now.getTime() - Date.parse(startedAt));
  }

  canDefer(deferrals: number): boolean {
    return this.delaysMs.length > 0 && deferrals < this.maxDeferrals;
  }

  /** It can still wait as a row: set aside only past a longer line. */
  deferralsSpent(deferrals: number): boolean {
    return this.delaysMs.length > 0 && deferrals >= this.maxDeferrals;
  }

  /** A Retry-After on 429 or 503 moves the step to the first that long, never past the last. */
  stepAfterFailure(attempt: number, failure: { status?: number; retryAfter?: string; date?: string }, now: Date): number {
    const step = attempt - 1;
    if (failure.status !== 429 && failure.status !== 503) return step;
    const wanted = retryAfterMs(failure.retryAfter, now, failure.date);
    if (wanted === undefined || wanted <= this.delaysMs[step]!) return step;
    for (let i = step; i < this.delaysMs.length; i++) if (this.delaysMs[i]! >= wanted) return i;
    return this.delaysMs.length - 1;
  }

  /** A busy endpoint: the first delay, whatever the attempts (busy is not failing). */
  deferStep(): number {
    return 0;
  }

  /** An open circuit: the first step that outlasts its cooldown. */
  postponeStep(retryInMs: number): number {
    const step = this.delaysMs.findIndex((delay) => delay >= retryInMs);
    return step < 0 ? this.delaysMs.length - 1 : step;
  }

  delayOf(step: number): number {
    return this.delaysMs[step]!;
  }
}

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
function retryAfterMs(value: string | undefined, now: Date, date?: string): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = httpDate(text);
  if (Number.isNaN(at)) return undefined;
  const sent = date === undefined ? Number.NaN : httpDate(date.trim());
  return Math.max(0, at - (Number.isNaN(sent) ? now.getTime() : sent));
}
