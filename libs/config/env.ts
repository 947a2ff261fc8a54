import { z } from 'zod';
import { LONGEST_DURATION, parseDuration } from './durations.js';
import { parseRetrySchedule } from '../retry-policy/schedule.js';
import { NamedError } from '../runtime/named-error.js';

/** What a boolean variable accepts as true (lower-cased, trimmed). */
export const TRUE_VALUES: readonly string[] = ['true', '1', 'yes'];

/** The longest SHUTDOWN_TIMEOUT: it becomes timers, and Node fires one past 24.8 days at once. */
export const SHUTDOWN_TIMEOUT_MAX = '1d';

/** Records `message` as the variable's problem; what the transform returns then is never used. */
export function refuse(ctx: z.RefinementCtx, message: string): never {
  ctx.addIssue({ code: 'custom', message });
  return z.NEVER;
}

/** A duration in ms, from 1 ms to `max`; otherwise the issue, `hint` saying what is taken and `never` what 0 means. */
function durationWithin(text: string, ctx: z.RefinementCtx, hint: string, max: string, never = ''): number {
  const ms = parseDuration(text);
  if (ms === undefined || ms < 1) return refuse(ctx, `"${text}" is not a duration ${hint}`);
  if (ms > parseDuration(max)!) return refuse(ctx, `"${text}" is longer than the most allowed, ${max}${never}`);
  return ms;
}

/** Field schemas each app composes its own z.object from, so that a library never reads process.env. */
export const envFields = {
  /** One URL (a node or a load balancer), or a comma-separated list of a cluster's nodes. */
  rabbitmqUrl: z
    .string()
    .default('amqp://guest:guest@127.0.0.1:5672')
    .transform((text, ctx) => {
      const urls = text.split(',').map((part) => part.trim()).filter((part) => part !== '');
      if (urls.length === 0 || !urls.every((url) => /^amqps?:\/\/[^\s]+$/.test(url) && URL.canParse(url))) {
        return refuse(ctx, 'must be an amqp:// or amqps:// URL, or a comma-separated list of them');
      }
      return urls;
    }),
  topologyPrefix: z
    .string()
    .default('webhooks')
    .refine((v) => /^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$/.test(v), 'must be 1-101 characters of letters, digits, ".", "_" or "-"'),
  logLevel: z.enum(['error', 'warn', 'info', 'debug']).default('info'),
  /** Comma-separated durations; empty means no retry (a single attempt). See parseRetrySchedule. */
  retrySchedule: z
    .string()
    .default('5s,5m,30m,2h,5h,10h,10h')
    .transform((text, ctx) => {
      const result = parseRetrySchedule(text);
      if ('problem' in result) return refuse(ctx, result.problem);
      return result.delays;
    }),
  /** `max`: the longest allowed, e.g. `1d` for a duration that becomes a timer. */
  durationMs: (fallback: string, max = LONGEST_DURATION) =>
    z
      .string()
      .default(fallback)
      .transform((text, ctx) => durationWithin(text, ctx, '(use e.g. 500ms, 10s, 1m)', max)),
  /** A duration (5d, 12h) in milliseconds, or `0` for never (the feature off). */
  durationOrNeverMs: (fallback: string) =>
    z
      .string()
      .default(fallback)
      .transform((text, ctx) => (text.trim() === '0' ? 0 : durationWithin(text, ctx, '(use e.g. 5d, 12h) or 0 for never', LONGEST_DURATION, ' (0 for never)'))),
  positiveInt: (fallback: number, max: number) =>
    z
      .string()
      .default(String(fallback))
      .transform((text, ctx) => {
        const n = Number(text);
        if (!/^\d+$/.test(text.trim()) || n < 1 || n > max) return refuse(ctx, `"${text}" must be a whole number from 1 to ${max}`);
        return n;
      }),
  boolean: (fallback: boolean) =>
    z
      .string()
      .default(String(fallback))
      .transform((text, ctx) => {
        const v = text.trim().toLowerCase();
        if (TRUE_VALUES.includes(v)) return true;
        if (['false', '0', 'no', ''].includes(v)) return false;
        return refuse(ctx, `"${text}" must be true or false`);
      }),
  /** RabbitMQ stream `x-max-age`: a number and one of Y, M, D, h, m, s. */
  streamMaxAge: z
    .string()
    .default('30D')
    .refine((v) => /^[1-9]\d*(Y|M|D|h|m|s)$/.test(v), 'must be a RabbitMQ max-age such as 7D, 12h or 1Y'),
  port: (fallback?: string) => {
    const port = z.string().refine((v) => /^\d+$/.test(v) && Number(v) <= 65_535, 'must be a port number from 0 to 65535');
    return fallback === undefined ? port.transform(Number).optional() : port.default(fallback).transform(Number);
  },
};

/** Members of each quorum queue and replicas of the failed stream when created; the broker caps them at its nodes. */
export const replicationFields = {
  QUORUM_GROUP_SIZE: envFields.positiveInt(3, 99),
  STREAM_CLUSTER_SIZE: envFields.positiveInt(3, 99),
};

/** The delivery log's variables, spread into the schema of each program that uses them. */
export const deliveryLogFields = {
  /** PostgreSQL: the failure index, the claims of resends and the delivery log; required outside development mode. */
  DATABASE_URL: z
    .string()
    .refine((v) => /^postgres(ql)?:\/\/\S+$/.test(v) && URL.canParse(v), 'must be a postgres:// or postgresql:// URL')
    .optional(),
  DELIVERY_LOG: z.enum(['on', 'off'], { error: 'must be on or off' }).default('on'),
  DELIVERY_LOG_RETENTION: envFields.durationMs('30d'),
  DELIVERY_LOG_RESPONSE_BYTES: z
    .string()
    .default('1024')
    .refine((v) => /^\d+$/.test(v.trim()) && Number(v) <= 65_536, 'must be a whole number of bytes from 0 to 65536')
    .transform(Number),
};

export function replicationOf(config: { QUORUM_GROUP_SIZE: number; STREAM_CLUSTER_SIZE: number }) {
  return { quorumGroupSize: config.QUORUM_GROUP_SIZE, streamClusterSize: config.STREAM_CLUSTER_SIZE };
}

export function topologyOf(config: Parameters<typeof replicationOf>[0] & { TOPOLOGY_PREFIX: string; FAILED_RETENTION: string; DELIVERY_LOG: string }) {
  return { prefix: config.TOPOLOGY_PREFIX, failedRetention: config.FAILED_RETENTION, replication: replicationOf(config), deliveriesStream: config.DELIVERY_LOG === 'on' };
}

/** Start-up configuration is wrong; the message names the variable so an operator can fix it. */
export class ConfigError extends NamedError {
  constructor(readonly variable: string, detail: string) {
    super(`Invalid configuration: ${variable}: ${detail}`);
  }
}

/** Parses an environment with a zod object of the variables: the first problem is a ConfigError; empty counts as unset. */
export function parseEnv<S extends z.ZodObject>(schema: S, env: Record<string, string | undefined>): z.infer<S> {
  const cleaned: Record<string, string> = {};
  for (const key of Object.keys(schema.shape)) {
    const value = env[key];
    if (value !== undefined && value.trim() !== '') cleaned[key] = value;
    // RETRY_SCHEDULE="" is meaningful (a single attempt), so an explicitly empty value is kept.
    else if (value !== undefined && key === 'RETRY_SCHEDULE') cleaned[key] = value;
  }
  const result = schema.safeParse(cleaned);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    const variable = String(issue.path[0] ?? 'environment');
    const message = issue.code === 'invalid_type' && cleaned[variable] === undefined ? 'is required' : issue.message;
    throw new ConfigError(variable, message);
  }
  return result.data;
}
