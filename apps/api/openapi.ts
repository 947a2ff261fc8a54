/** OpenAPI 3.1 description of the API; test/integration/api-openapi.test.ts checks real responses against it. */
const errorResponse = (description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } },
});

export const openApiDocument = {
  openapi: '3.1.0',
  info: {
    title: 'Payment webhooks: resend API',
    version: '1.0.0',
    description:
      'Resends failed webhook notifications (charge.completed, payout, refund.completed) to the merchant server. ' +
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
                ],
              },
              status: { type: 'integer' },
            },
          },
          data: { type: 'null' },
        },
      },
      Readiness: {
        type: 'object',
        required: ['status', 'broker', 'index', 'unresolved'],
        properties: {
          status: { enum: ['ready', 'not ready'] },
          broker: { enum: ['connected', 'disconnected'] },
          index: { enum: ['caught up', 'replaying'] },
          unresolved: { type: 'integer', minimum: 0 },
        },
      },
    },
  },
} as const;
