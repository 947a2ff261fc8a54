import { z } from 'zod';
import { merchantIdSchema } from '../../libs/contracts/index.js';

/**
 * One declaration per route: method, path, input, output and errors. Express mounts handlers by
 * operationId (mount.ts parses params and query with these schemas), and openapi.ts makes the
 * OpenAPI document from this table, so neither can drift from the other.
 */
export interface RouteDeclaration {
  operationId: string;
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** OpenAPI template: `/admin/merchants/{merchantId}`. */
  path: string;
  summary: string;
  description?: string;
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
  /** Error answers by status, in the envelope; the description names the codes. */
  errors: Record<string, string>;
}

/** Who may call a route (OpenAPI security requirements): a merchant, the platform's operator. */
export const MERCHANT_AUTH = [{ merchantPublicKey: [], accessToken: [] }] as const;
export const ADMIN_AUTH = [{ adminToken: [] }] as const;

export const merchantIdParams = z.strictObject({ merchantId: merchantIdSchema });
