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
