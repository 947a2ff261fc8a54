/** OpenAPI 3.1 description of the API; test/integration/api-openapi.test.ts checks real responses against it. */
const errorResponse = (description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } },
});

const merchantIdParameter = {
  name: 'merchantId',
  in: 'path',
  required: true,
  schema: { type: 'string', pattern: '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$' },
} as const;

/** A success in the envelope: `data` holds what the operation returns. */
const dataResponse = (description: string, data: object) => ({
  description,
  content: {
    'application/json': {
      schema: {
        type: 'object',
        additionalProperties: false,
        required: ['message', 'error', 'data'],
        properties: { message: { type: 'string' }, error: { type: 'null' }, data },
      },
    },
  },
});

const merchantResponse = (description: string) => dataResponse(description, { $ref: '#/components/schemas/Merchant' });

const adminErrors = {
  '400': errorResponse('invalid_merchant_id, invalid_settings (the message names the field), invalid_body'),
  '401': errorResponse('missing_credentials, invalid_credentials, token_expired'),
  '403': errorResponse('insufficient_scope: the token lacks webhooks:admin (a merchant\'s token)'),
  '405': errorResponse('method_not_allowed'),
  '413': errorResponse('Request body too large'),
  '503': errorResponse('service_unavailable: the broker or the merchant directory is not available yet; auth_unavailable'),
} as const;

export const openApiDocument = {
  openapi: '3.1.0',
  info: {
    title: 'Payment webhooks: resend API and admin API',
    version: '1.0.0',
    description:
      'Resends failed webhook notifications (charge.completed, payout, refund.completed) to the merchant server. ' +
      'The admin API (/admin/...) lets the dashboard\'s backend set up merchants\' webhooks. ' +
      'Every answer uses the envelope {message, error, data}.',
  },
  servers: [{ url: 'http://127.0.0.1:8080' }],
  paths: {
    '/nucleus/tnx/webhook': {
      post: {
        operationId: 'resendWebhook',
        summary: 'Resend the failed webhook(s) of a transaction reference',
        description:
          'Finds the caller\'s unresolved failed webhooks for the reference (a refund is found by refundRef or tnxRef), ' +
          'sends them again with their original webhook-id, and marks them resolved. If delivery fails again they return ' +
          'to the failed queue and can be resent again. No request body is needed; a JSON body is ignored.',
        security: [{ merchantPublicKey: [], accessToken: [] }],
        parameters: [
          {
            name: 'reference',
            in: 'query',
            required: true,
            description:
              'The reference used when initiating the transaction (tx_ref), URL-encoded: 1 to 200 characters, any except ' +
              'control characters; the same set the service accepts from upstream, so every failed webhook can be resent.',
            schema: { type: 'string', minLength: 1, maxLength: 200, pattern: '^[^\\u0000-\\u001f\\u007f-\\u009f]+$' },
          },
        ],
        responses: {
          '200': {
            description: 'The webhook was sent again',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/SuccessEnvelope' } } },
          },
          '400': errorResponse('Missing, repeated or malformed reference; unknown parameter; body that is not JSON'),
          '401': errorResponse('Missing or invalid public key or access token, or an expired token'),
          '403': errorResponse('The token and the public key name different merchants'),
          '404': errorResponse(
            'No unresolved failed webhook for this merchant and reference: none failed, it was already resent, or another ' +
              'request (on this or another replica) is resending it at this moment. Of two concurrent resends of one ' +
              'reference, the first answers 200 and the other 404; the webhook is delivered once.',
          ),
          '409': errorResponse('webhook_disabled: the merchant\'s webhook is disabled or not set up; the failed entry stays and can be resent once it is enabled'),
          '413': errorResponse('Request body too large'),
          '429': errorResponse('Rate limited; see Retry-After'),
          '431': errorResponse('Request headers too large'),
          '503': errorResponse(
            'service_unavailable: broker unavailable or slow to confirm (flow control), or the failed queue index not ready; ' +
              'auth_unavailable: the auth service\'s keys could not be fetched. See Retry-After',
          ),
        },
      },
    },
    '/admin/merchants/{merchantId}': {
      parameters: [merchantIdParameter],
      get: {
        operationId: 'getMerchant',
        summary: 'A merchant\'s webhook settings (never the secret)',
        security: [{ adminToken: [] }],
        responses: {
          '200': merchantResponse('The merchant\'s settings'),
          ...adminErrors,
          '404': errorResponse('merchant_not_found'),
        },
      },
      put: {
        operationId: 'putMerchant',
        summary: 'Create or replace a merchant\'s settings',
        description:
          'Creates the merchant or replaces its public key and webhook. The webhook secret is the service\'s: a webhook set up ' +
          'for the first time gets a new whsec_ secret, returned in this answer only (webhook.secret); later PUTs keep it. ' +
          'The URL must be https (http only in development mode), carry no credentials, and not be a loopback, private or ' +
          'link-local address literal. Leaving out webhook removes it (webhooks not set up); leaving out events means all three.',
        security: [{ adminToken: [] }],
        requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/MerchantInput' } } } },
        responses: {
          '200': merchantResponse('Updated'),
          '201': merchantResponse('Created; webhook.secret is shown this once'),
          ...adminErrors,
          '409': errorResponse('public_key_taken: another merchant has this public key; directory_read_only: MERCHANT_DIRECTORY=file'),
        },
      },
    },
    '/admin/merchants/{merchantId}/webhook/secret/rotate': {
      parameters: [merchantIdParameter],
      post: {
        operationId: 'rotateWebhookSecret',
        summary: 'Rotate the webhook secret, signing with both secrets during a grace period',
        description:
          'Returns the new secret (this once). Until previousSecretExpiresAt every webhook carries two signatures in ' +
          'webhook-signature, one per secret, so the merchant\'s check passes with either; after it, only the new one.',
        security: [{ adminToken: [] }],
        requestBody: {
          required: false,
          content: {
            'application/json': {
              schema: {
                type: 'object',
                additionalProperties: false,
                properties: { graceSeconds: { type: 'integer', minimum: 0, maximum: 2_592_000, default: 86_400 } },
              },
            },
          },
        },
        responses: {
          '200': dataResponse('Rotated', {
            type: 'object',
            additionalProperties: false,
            required: ['secret', 'previousSecretExpiresAt'],
            properties: {
              secret: { type: 'string', pattern: '^whsec_' },
              previousSecretExpiresAt: { type: ['string', 'null'], description: 'ISO 8601 time; null when no previous secret is in its grace period' },
            },
          }),
          ...adminErrors,
          '404': errorResponse('merchant_not_found'),
          '409': errorResponse('webhook_not_set_up: PUT a webhook first; directory_read_only: MERCHANT_DIRECTORY=file'),
        },
      },
    },
    '/healthz': {
      get: {
        operationId: 'health',
        summary: 'Liveness',
        responses: {
          '200': {
            description: 'The process is up',
            content: {
              'application/json': {
                schema: { type: 'object', required: ['status'], properties: { status: { const: 'ok' } } },
              },
            },
          },
        },
      },
    },
    '/readyz': {
      get: {
        operationId: 'ready',
        summary: 'Readiness: broker connected and failed index caught up',
        responses: {
          '200': { description: 'Ready', content: { 'application/json': { schema: { $ref: '#/components/schemas/Readiness' } } } },
          '503': { description: 'Not ready', content: { 'application/json': { schema: { $ref: '#/components/schemas/Readiness' } } } },
        },
      },
    },
    '/metrics': {
      get: {
        operationId: 'metrics',
        summary: 'Prometheus metrics (text exposition format)',
        responses: { '200': { description: 'Metrics', content: { 'text/plain': { schema: { type: 'string' } } } } },
      },
    },
    '/openapi.json': {
      get: {
        operationId: 'openapi',
        summary: 'This document',
        responses: { '200': { description: 'OpenAPI 3.1 document', content: { 'application/json': { schema: { type: 'object' } } } } },
      },
    },
  },
  components: {
    securitySchemes: {
      adminToken: {
        type: 'http',
        scheme: 'bearer',
        bearerFormat: 'JWT',
        description: 'Access token from the platform auth service whose scope includes webhooks:admin',
      },
      merchantPublicKey: {
        type: 'apiKey',
        in: 'header',
        name: 'x-auth-token',
        description: 'Merchant public key (dashboard: Settings, Generate API keys, Merchant public key)',
      },
      accessToken: {
        type: 'http',
        scheme: 'bearer',
        bearerFormat: 'JWT',
        description: 'Access token from the platform auth service; sub is the merchant id',
      },
    },
    schemas: {
      SuccessEnvelope: {
        type: 'object',
        additionalProperties: false,
        required: ['message', 'error', 'data'],
        properties: {
          message: { type: 'string', pattern: '^webhook sent for reference .+$' },
          error: { type: 'null' },
          data: { type: 'null' },
        },
      },
      ErrorEnvelope: {
        type: 'object',
        additionalProperties: false,
        required: ['message', 'error', 'data'],
        properties: {
          message: { type: 'string' },
          error: {
            type: 'object',
            additionalProperties: false,
            required: ['code', 'status'],
            properties: {
              code: {
                type: 'string',
                enum: [
                  'missing_reference',
                  'invalid_reference',
                  'unknown_parameter',
                  'invalid_body',
                  'bad_request',
                  'missing_credentials',
                  'invalid_credentials',
                  'token_expired',
                  'merchant_mismatch',
                  'not_found',
                  'webhook_disabled',
                  'route_not_found',
                  'method_not_allowed',
                  'body_too_large',
                  'header_too_large',
                  'rate_limited',
                  'service_unavailable',
                  'auth_unavailable',
                  'internal_error',
                  'insufficient_scope',
                  'invalid_merchant_id',
                  'invalid_settings',
                  'merchant_not_found',
                  'public_key_taken',
                  'webhook_not_set_up',
                  'directory_read_only',
                ],
              },
              status: { type: 'integer' },
            },
          },
          data: { type: 'null' },
        },
      },
      MerchantInput: {
        type: 'object',
        additionalProperties: false,
        required: ['publicKey'],
        properties: {
          publicKey: { type: 'string', minLength: 8, maxLength: 512 },
          webhook: {
            type: 'object',
            additionalProperties: false,
            required: ['url', 'enabled'],
            properties: {
              url: { type: 'string', maxLength: 2048 },
              enabled: { type: 'boolean' },
              events: { type: 'array', minItems: 1, uniqueItems: true, items: { enum: ['charge.completed', 'payout', 'refund.completed'] } },
            },
          },
        },
      },
      Merchant: {
        type: 'object',
        additionalProperties: false,
        required: ['id', 'publicKey', 'webhook'],
        properties: {
          id: { type: 'string' },
          publicKey: { type: 'string' },
          webhook: {
            oneOf: [
              { type: 'null' },
              {
                type: 'object',
                additionalProperties: false,
                required: ['url', 'enabled', 'events', 'previousSecretExpiresAt'],
                properties: {
                  url: { type: 'string' },
                  enabled: { type: 'boolean' },
                  events: { type: 'array', items: { enum: ['charge.completed', 'payout', 'refund.completed'] } },
                  previousSecretExpiresAt: { type: ['string', 'null'], description: 'ISO 8601 time; null when no previous secret is in its grace period' },
                  secret: { type: 'string', pattern: '^whsec_', description: 'Only in the answer that created the webhook' },
                },
              },
            ],
          },
        },
      },
      Readiness: {
        type: 'object',
        required: ['status', 'broker', 'index', 'unresolved'],
        properties: {
          status: { enum: ['ready', 'not ready'] },
          broker: { enum: ['connected', 'disconnected'] },
          index: { enum: ['caught up', 'replaying'] },
          merchants: { enum: ['caught up', 'replaying'] },
          unresolved: { type: 'integer', minimum: 0 },
        },
      },
    },
  },
} as const;
