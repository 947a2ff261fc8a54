import { isIP } from 'node:net';
import { z } from 'zod';
import { MAX_ENDPOINTS_PER_MERCHANT } from '../../libs/merchants/schema.js';
import { DEV_JWT_SECRET, deliveryLogFields, envFields, merchantStoreFields, parseEnv, refuse, replicationFields, requireMerchantStore, SHUTDOWN_TIMEOUT_MAX, tracingFields } from '../../libs/config/index.js';

/** `<per minute>` or `<per minute>,<burst>`; the burst defaults to a third of the rate. */
function rateLimit(defaultText: string, what: string) {
  return z
    .string()
    .default(defaultText)
    .transform((text, ctx) => {
      const match = /^\s*(\d+)\s*(?:,\s*(\d+)\s*)?$/.exec(text);
      const perMinute = Number(match?.[1]);
      const burst = match?.[2] === undefined ? Math.max(1, Math.ceil(perMinute / 3)) : Number(match[2]);
      if (!match || perMinute < 1 || perMinute > 1_000_000 || burst < 1 || burst > 1_000_000) {
        return refuse(ctx, `"${text}" must be ${what} per minute, optionally with a burst: e.g. ${defaultText.split(',')[0]} or ${defaultText}`);
      }
      return { perMinute, burst };
    });
}

/** Hosts a browser treats as a secure context over plain http: a portal there is one machine's demo. */
function isLoopbackUrl(url: string): boolean {
  const host = new URL(url).hostname;
  return host === 'localhost' || host === '[::1]' || /^127(\.\d{1,3}){3}$/.test(host);
}

/** Compared byte for byte: the newline of the file a value came from (a Kubernetes Secret) would refuse every token. */
const unpadded = (value: string) => value.trim() === value;
const PADDED = 'must not begin or end with whitespace (a newline from the file it came from?): every token would be refused';

const TRUST_PRESETS = new Set(['loopback', 'linklocal', 'uniquelocal']);

/** A hop count, or Express's presets, addresses and CIDRs; never `true`: any client could name its own address. */
function trustProxy() {
  return z
    .string()
    .optional()
    .transform((text, ctx): number | string[] | undefined => {
      const value = text?.trim();
      if (!value || value === 'false') return undefined;
      if (/^\d{1,2}$/.test(value)) return Number(value) === 0 ? undefined : Number(value);
      if (value === 'true') {
        return refuse(ctx, 'must not be true (any client could name its own address in X-Forwarded-For): give the proxies\' hop count, e.g. 1, or their addresses or CIDRs');
      }
      const entries = value.split(',').map((entry) => entry.trim());
      const fits = (entry: string) => {
        const [address, bits, ...rest] = entry.split('/');
        const family = isIP(address ?? '');
        return TRUST_PRESETS.has(entry) || (family !== 0 && rest.length === 0 && (bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128))));
      };
      const bad = entries.find((entry) => !fits(entry));
      if (bad === undefined) return entries;
      return refuse(ctx, `"${bad.slice(0, 80)}" must be a hop count, loopback, linklocal, uniquelocal, an IP address or a CIDR such as 10.0.0.0/8`);
    });
}

export const apiEnvSchema = z
  .object({
    RABBITMQ_URL: envFields.rabbitmqUrl,
    TOPOLOGY_PREFIX: envFields.topologyPrefix,
    ...replicationFields,
    PORT: envFields.port('8080'),
    METRICS_PORT: envFields.port(),
    ADMIN_PORT: envFields.port(),
    WEBHOOKS_DEV: envFields.boolean(false),
    ...merchantStoreFields,
    // Both programs declare the whole topology, so the API needs the same retention.
    FAILED_RETENTION: envFields.streamMaxAge,
    AUTH_JWT_SECRET: z.string().min(32, 'must be at least 32 characters (256 bits for HS256)').refine(unpadded, PADDED).optional(),
    AUTH_JWKS_URL: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).optional(),
    AUTH_JWT_ISSUER: z.string().min(1).max(500).refine(unpadded, PADDED).optional(),
    AUTH_JWT_AUDIENCE: z.string().min(1).max(500).refine(unpadded, PADDED).optional(),
    RESEND_RATE_LIMIT: rateLimit('60,20', 'resends'),
    LOG_RATE_LIMIT: rateLimit('300,60', 'log reads'),
    ALLOW_PRIVATE_TARGETS: envFields.boolean(false),
    MAX_ENDPOINTS_PER_MERCHANT: envFields.positiveInt(MAX_ENDPOINTS_PER_MERCHANT, MAX_ENDPOINTS_PER_MERCHANT),
    SHUTDOWN_TIMEOUT: envFields.durationMs('30s', SHUTDOWN_TIMEOUT_MAX),
    /** The base of portal links, as merchants reach the portal: never taken from a request. */
    PORTAL_PUBLIC_URL: z
      .url({ protocol: /^https?$/, error: 'must be an http(s) URL such as https://webhooks.example.com' })
      .transform((url) => url.replace(/\/+$/, ''))
      .optional(),
    TRUST_PROXY: trustProxy(),
    /** Origins that may show the portal in an iframe (the dashboard's), space-separated. */
    PORTAL_FRAME_ANCESTORS: z
      .string()
      .default('')
      .transform((text, ctx) => {
        const origins = text.split(/\s+/).filter((o) => o !== '');
        const bad = origins.find((origin) => !/^https?:\/\/[A-Za-z0-9.*-]+(:\d{1,5})?$/.test(origin));
        if (bad === undefined) return origins;
        return refuse(ctx, `"${bad.slice(0, 80)}" must be an origin such as https://dashboard.example.com`);
      }),
    ...deliveryLogFields,
    LOG_LEVEL: envFields.logLevel,
    ...tracingFields,
  })
  .superRefine((env, ctx) => {
    // Merchants, and with them the failure index, resends and the log: PostgreSQL, whatever DELIVERY_LOG.
    requireMerchantStore(env, ctx);
    if (!env.AUTH_JWT_SECRET && !env.AUTH_JWKS_URL) {
      ctx.addIssue({ code: 'custom', path: ['AUTH_JWT_SECRET'], message: 'set AUTH_JWT_SECRET or AUTH_JWKS_URL to verify access tokens' });
    } else if (env.AUTH_JWT_SECRET && env.AUTH_JWKS_URL) {
      ctx.addIssue({ code: 'custom', path: ['AUTH_JWKS_URL'], message: 'set AUTH_JWT_SECRET or AUTH_JWKS_URL, not both' });
    }
    if (!env.WEBHOOKS_DEV && env.AUTH_JWT_SECRET === DEV_JWT_SECRET) {
      ctx.addIssue({ code: 'custom', path: ['AUTH_JWT_SECRET'], message: 'is the development secret; outside development mode use your own' });
    }
    if (!env.WEBHOOKS_DEV && env.AUTH_JWKS_URL?.startsWith('http:')) {
      ctx.addIssue({ code: 'custom', path: ['AUTH_JWKS_URL'], message: 'must be https outside development mode (keys fetched in clear can be swapped)' });
    }
    if (!env.WEBHOOKS_DEV && !env.PORTAL_PUBLIC_URL) {
      ctx.addIssue({ code: 'custom', path: ['PORTAL_PUBLIC_URL'], message: 'is required outside development mode: the https address merchants reach the portal at (links are never built from a request\'s Host header)' });
    } else if (!env.WEBHOOKS_DEV && env.PORTAL_PUBLIC_URL?.startsWith('http:') && !isLoopbackUrl(env.PORTAL_PUBLIC_URL)) {
      ctx.addIssue({ code: 'custom', path: ['PORTAL_PUBLIC_URL'], message: 'must be https outside development mode (the link carries a session token); http only on localhost, 127.0.0.1 or [::1]' });
    }
    if (env.METRICS_PORT !== undefined && env.METRICS_PORT !== 0 && env.METRICS_PORT === env.PORT) {
      ctx.addIssue({ code: 'custom', path: ['METRICS_PORT'], message: 'must differ from PORT' });
    }
    if (env.ADMIN_PORT !== undefined && env.ADMIN_PORT !== 0 && (env.ADMIN_PORT === env.PORT || env.ADMIN_PORT === env.METRICS_PORT)) {
      ctx.addIssue({ code: 'custom', path: ['ADMIN_PORT'], message: 'must differ from PORT and METRICS_PORT' });
    }
  });

export type ApiConfig = z.infer<typeof apiEnvSchema>;

export function loadApiConfig(env: Record<string, string | undefined>): ApiConfig {
  return parseEnv(apiEnvSchema, env);
}
