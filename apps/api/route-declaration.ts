import { z } from 'zod';
import { merchantIdSchema } from '../../libs/contracts/index.js';

/** One declaration per route: mount.ts serves it and openapi.ts documents it, so neither can drift from the other. */
export interface RouteDeclaration {
  operationId: string;
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** OpenAPI template: `/admin/merchants/{merchantId}`. */
  path: string;
  summary: string;
  description?: string;
  /** Absent: MERCHANT_AUTH under /nucleus/, ADMIN_AUTH under /admin/ (the admin router's check), else none. */
  security?: ReadonlyArray<Record<string, readonly string[]>>;
  input?: {
    params?: z.ZodObject;
    query?: z.ZodObject;
    body?: z.ZodType;
    bodyRequired?: boolean;
    bodyMediaTypes?: readonly string[];
    /** Header parameters, as OpenAPI parameter objects. */
    headers?: readonly object[];
  };
  /** Successful answers by status: the whole body's schema, or a media type that is not JSON. */
  output: Record<string, { description: string; schema?: z.ZodType; mediaType?: string }>;
  /** Error answers by status, in the envelope; the description names the codes (none: only what any request may get). */
  errors?: Record<string, string>;
  /** Its successful answers carry the merchant's version as their ETag (the admin API's merchant and endpoint routes). */
  versioned?: true;
}

/** Who may call a route (OpenAPI security requirements): a merchant, the platform's operator. */
export const MERCHANT_AUTH = [{ merchantPublicKey: [], accessToken: [] }] as const;
export const ADMIN_AUTH = [{ adminToken: [] }] as const;

export const merchantIdParams = z.strictObject({ merchantId: merchantIdSchema });

/** The errors every admin route may answer. */
export const ADMIN_ERRORS = {
  '400':
    'invalid_merchant_id; invalid_settings: the message names the field and what it allows ("publicKey is required"); ' +
    'invalid_body; invalid_idempotency_key',
  '401': 'missing_credentials, invalid_credentials, token_expired',
  '403': "insufficient_scope: the token lacks webhooks:admin (a merchant's token)",
  '405': 'method_not_allowed',
  '503': 'service_unavailable: the broker or the merchant directory is not available yet; auth_unavailable',
};
export const IDEMPOTENCY_ERRORS = {
  '412': 'precondition_failed: If-Match names a version the merchant no longer has; GET it again and redo the change',
  '422': 'idempotency_key_reused: this Idempotency-Key was used within 24 h for a different request',
};
export const PUBLIC_KEY_TAKEN = 'public_key_taken: another merchant has this public key';

const optionalHeader = (name: string, schema: object, description: string) => ({ name, in: 'header', required: false, description, schema });
export const GUARDED_WRITE_HEADERS = [
  optionalHeader(
    'Idempotency-Key',
    { type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x21-\\x7e]+$' },
    'Makes the write safe to repeat (a timeout, a 503, a double click): the same key within 24 hours gets the first ' +
      'answer again, secret included, from any replica and after restarts, and changes nothing; that answer carries ' +
      'Idempotent-Replayed: true. The same key with a different request answers 422 idempotency_key_reused. Use a new ' +
      'UUID per intended change.',
  ),
  optionalHeader(
    'If-Match',
    { type: 'string', maxLength: 64 },
    'The ETag a GET of this merchant answered (its version, e.g. "7"): the write is made only if nobody changed ' +
      'the merchant since, else 412 precondition_failed. * needs a merchant that exists, at any version; on PUT, "0" ' +
      'creates only a merchant that does not exist yet.',
  ),
];
