import { isIP } from 'node:net';
import { z } from 'zod';
import { MAX_ENDPOINTS_PER_MERCHANT } from '../../libs/merchants/schema.js';
import { DEV_JWT_SECRET, deliveryLogFields, envFields, merchantStoreFields, parseEnv, replicationFields, requireDatabase, requireMerchantStore, tracingFields } from '../../libs/config/index.js';

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
        ctx.addIssue({ code: 'custom', message: `"${text}" must be ${what} per minute, optionally with a burst: e.g. ${defaultText.split(',')[0]} or ${defaultText}` });
        return z.NEVER;
      }
      return { perMinute, burst };
    });
}

/**
 * Hosts a browser treats as a secure context over plain http (and keeps Secure cookies for): a
 * portal there is one machine's demo, where nothing crosses a network.
 */
export function isLoopbackUrl(url: string): boolean {
  const host = new URL(url).hostname;
  return host === 'localhost' || host === '[::1]' || /^127(\.\d{1,3}){3}$/.test(host);
}

/** Express's names for address ranges; anything else in the list must be an address or a CIDR. */
const TRUST_PRESETS = new Set(['loopback', 'linklocal', 'uniquelocal']);

/**
 * TRUST_PROXY: a hop count (`1`: the proxy in front of the API), or a comma-separated list of
 * Express's presets, addresses and CIDRs. `true` (trust any proxy) is refused: the client could
 * then name any address in X-Forwarded-For and so get a new budget per request.
 */
function trustProxy() {
  return z
    .string()
    .optional()
    .transform((text, ctx): number | string[] | undefined => {
      if (text === undefined || text.trim() === '' || text.trim() === 'false') return undefined;
      const value = text.trim();
      if (/^\d{1,2}$/.test(value)) return Number(value) === 0 ? undefined : Number(value);
      if (value === 'true') {
        ctx.addIssue({ code: 'custom', message: 'must not be true (any client could name its own address in X-Forwarded-For): give the proxies\' hop count, e.g. 1, or their addresses or CIDRs' });
        return z.NEVER;
      }
      const entries = value.split(',').map((entry) => entry.trim());
      for (const entry of entries) {
        const [address, bits, ...rest] = entry.split('/');
        const family = isIP(address ?? '');
        const fits = TRUST_PRESETS.has(entry) || (family !== 0 && rest.length === 0 && (bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128))));
        if (!fits) {
          ctx.addIssue({ code: 'custom', message: `"${entry.slice(0, 80)}" must be a hop count, loopback, linklocal, uniquelocal, an IP address or a CIDR such as 10.0.0.0/8` });
          return z.NEVER;
        }
      }
      return entries;
    });
}

export const apiEnvSchema = z
  .object({
    RABBITMQ_URL: envFields.rabbitmqUrl,
    TOPOLOGY_PREFIX: envFields.topologyPrefix,
    ...replicationFields,
    PORT: envFields.port('8080'),
    /** When set, /metrics is served here and not on PORT, which then exposes only the resend API and health. */
    METRICS_PORT: envFields.port(),
    /** When set, the admin API (/admin/...) is served here and not on PORT, which then faces merchants only. */
    ADMIN_PORT: envFields.port(),
    /** Set by withDevDefaults when development mode is switched on (WEBHOOKS_DEV=true). */
    WEBHOOKS_DEV: envFields.boolean(false),
    ...merchantStoreFields,
    // Both programs declare the whole topology, so the API needs the same retention.
    FAILED_RETENTION: envFields.streamMaxAge,
    AUTH_JWT_SECRET: z.string().min(32, 'must be at least 32 characters (256 bits for HS256)').optional(),
    AUTH_JWKS_URL: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).optional(),
    /** Checked against the token's iss and aud when set; recommended. */
    AUTH_JWT_ISSUER: z.string().min(1).max(500).optional(),
    AUTH_JWT_AUDIENCE: z.string().min(1).max(500).optional(),
    /** Resends per merchant per minute, optionally with the burst allowed at once: `60` or `60,20`. */
    RESEND_RATE_LIMIT: rateLimit('60,20', 'resends'),
    /**
     * Reads of the delivery log (list, webhook, feed) per merchant per minute, and the burst: the
     * log's PostgreSQL is shared by every merchant, so one merchant's script must not take it.
     */
    LOG_RATE_LIMIT: rateLimit('300,60', 'log reads'),
    /** Webhook URLs written through the admin API: loopback and private addresses refused unless true. */
    ALLOW_PRIVATE_TARGETS: envFields.boolean(false),
    /** The most endpoints a merchant may have through the admin API and the portal (409 endpoint_limit past it). */
    MAX_ENDPOINTS_PER_MERCHANT: envFields.positiveInt(MAX_ENDPOINTS_PER_MERCHANT, MAX_ENDPOINTS_PER_MERCHANT),
    /** How long a stop (SIGTERM) may take, requests in flight included; the process exits by then whatever the broker does. */
    SHUTDOWN_TIMEOUT: envFields.durationMs('30s'),
    /**
     * The merchant portal's address as merchants reach it (behind a proxy: its https URL), the base
     * of the links POST /admin/merchants/{id}/portal-sessions returns. Required outside development
     * mode (https, or http on a loopback host for a one-machine demo); in development mode this
     * API's own address when unset. Never taken from a request.
     */
    PORTAL_PUBLIC_URL: z
      .url({ protocol: /^https?$/, error: 'must be an http(s) URL such as https://webhooks.example.com' })
      .transform((url) => url.replace(/\/+$/, ''))
      .optional(),
    /**
     * Express's `trust proxy`: which proxies in front of the API may say, in X-Forwarded-For, which
     * client they forward (the address the portal's per-address limits and the audit trail use).
     * Unset: none, the client is the peer of the TCP connection.
     */
    TRUST_PROXY: trustProxy(),
    /** Origins that may show the portal in an iframe (the dashboard's), space-separated; none but its own when unset. */
    PORTAL_FRAME_ANCESTORS: z
      .string()
      .default('')
      .transform((text, ctx) => {
        const origins = text.split(/\s+/).filter((o) => o !== '');
        for (const origin of origins) {
          if (!/^https?:\/\/[A-Za-z0-9.*-]+(:\d{1,5})?$/.test(origin)) {
            ctx.addIssue({ code: 'custom', message: `"${origin.slice(0, 80)}" must be an origin such as https://dashboard.example.com` });
            return z.NEVER;
          }
        }
        return origins;
      }),
    ...deliveryLogFields,
    LOG_LEVEL: envFields.logLevel,
    /** The standard OpenTelemetry variables; tracing is off without an OTLP endpoint. */
    ...tracingFields,
  })
  .superRefine((env, ctx) => {
    requireMerchantStore(env, ctx);
    requireDatabase(env, ctx);
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
