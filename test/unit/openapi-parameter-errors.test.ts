import { openApiDocument } from '../../apps/api/openapi.js';

/**
 * The API reference names the codes a bad parameter gets. mount.ts answers a path parameter that
 * fails its schema with 400 invalid_parameter (invalid_merchant_id for merchantId), and a query
 * parameter the route does not take with 400 unknown_parameter: an operation that has such
 * parameters must say so in its 400, or a client reading /docs cannot know the answer it will get
 * (the endpoint routes of issue 56 listed only the merchant's codes).
 */

interface Parameter {
  name: string;
  in: string;
}
interface Operation {
  operationId: string;
  parameters?: Parameter[];
  responses: Record<string, { description: string }>;
}

function operations(): Operation[] {
  return Object.values(openApiDocument.paths as Record<string, Record<string, Operation>>).flatMap((item) =>
    Object.entries(item)
      .filter(([method]) => /^(get|post|put|patch|delete)$/.test(method))
      .map(([, operation]) => operation),
  );
}

const codesOf = (description: string | undefined) => new Set((description ?? '').match(/[a-z]+(?:_[a-z]+)+/g) ?? []);

describe('the API reference names the 400 a bad parameter gets', () => {
  it('lists invalid_parameter on every operation with a path parameter other than merchantId', () => {
    const missing = operations()
      .filter((op) => (op.parameters ?? []).some((p) => p.in === 'path' && p.name !== 'merchantId'))
      .filter((op) => !codesOf(op.responses['400']?.description).has('invalid_parameter'))
      .map((op) => op.operationId);
    expect(missing).toEqual([]);
  });

  it('lists unknown_parameter on every operation that takes query parameters', () => {
    const missing = operations()
      .filter((op) => (op.parameters ?? []).some((p) => p.in === 'query'))
      .filter((op) => !codesOf(op.responses['400']?.description).has('unknown_parameter'))
      .map((op) => op.operationId);
    expect(missing).toEqual([]);
  });

  it('lists invalid_merchant_id on every operation with a merchantId path parameter', () => {
    const missing = operations()
      .filter((op) => (op.parameters ?? []).some((p) => p.in === 'path' && p.name === 'merchantId'))
      .filter((op) => !codesOf(op.responses['400']?.description).has('invalid_merchant_id'))
      .map((op) => op.operationId);
    expect(missing).toEqual([]);
  });
});

/**
 * The headers a client acts on are in the document, so a client generated from it can read them: the
 * ETag it sends back as If-Match, a replay's mark, Retry-After, and how to authenticate.
 */
describe('the API reference declares the answers headers', () => {
  type Responses = Record<string, { headers?: Record<string, unknown> }>;
  const responsesOf = (path: string, method: string) => (openApiDocument.paths as unknown as Record<string, Record<string, { responses: Responses }>>)[path]![method]!.responses;

  it('an ETag on every answer of a merchant or an endpoint, Idempotent-Replayed on their writes', () => {
    expect(Object.keys(responsesOf('/admin/merchants/{merchantId}', 'get')['200']!.headers ?? {})).toEqual(['ETag']);
    expect(Object.keys(responsesOf('/admin/merchants/{merchantId}', 'put')['201']!.headers ?? {})).toEqual(['ETag', 'Idempotent-Replayed']);
    expect(Object.keys(responsesOf('/admin/merchants/{merchantId}/endpoints/{endpointId}', 'patch')['200']!.headers ?? {})).toEqual(['ETag', 'Idempotent-Replayed']);
    // The audit trail answers no version.
    expect(responsesOf('/admin/merchants/{merchantId}/audit', 'get')['200']!.headers).toBeUndefined();
  });

  it('Retry-After on every error answer 429 and 503, WWW-Authenticate on the 401 of every route that authenticates', () => {
    type Operation = { security?: unknown[]; responses: Record<string, { headers?: Record<string, unknown>; content?: Record<string, { schema?: { $ref?: string } }> }> };
    let checked = 0;
    for (const [path, methods] of Object.entries(openApiDocument.paths as unknown as Record<string, Record<string, Operation>>)) {
      for (const [method, { security, responses }] of Object.entries(methods)) {
        for (const [status, name] of [['429', 'Retry-After'], ['503', 'Retry-After'], ['401', 'WWW-Authenticate']] as const) {
          const answer = responses[status];
          if (!answer?.content?.['application/json']?.schema?.$ref?.endsWith('ErrorEnvelope') || (status === '401' && !security)) continue;
          expect([path, method, status, Object.keys(answer.headers ?? {})]).toEqual([path, method, status, [name]]);
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(20);
  });
});
