import { capturingLogger } from '../support/capturing-logger.js';

describe('the programs\' logger', () => {
  it('redacts the value of every field whose name says it holds a secret, token, password or signature', () => {
    const lines: Array<Record<string, unknown>> = [];
    const fields = { secret: 'whsec_c2VjcmV0', webhookSecret: 'whsec_c2VjcmV0', token: 'abc.def', authorization: 'Bearer x', password: 'pw', signature: 'v1,x', publicKey: 'pk_1', apiKey: 'k' };
    capturingLogger(lines).info('a line', fields);
    expect(lines).toHaveLength(1);
    for (const name of Object.keys(fields)) expect({ [name]: lines[0]![name] }).toEqual({ [name]: '[redacted]' });
  });

  it("keeps a time whose field name mentions a secret (the rotation's grace end, previousSecretExpiresAt), and still redacts a secret given under such a name", () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = capturingLogger(lines);
    logger.info('endpoint secret rotated', { merchantId: 'm_1', previousSecretExpiresAt: '2026-11-24T09:00:00.000Z' });
    logger.info('endpoint secret rotated', { merchantId: 'm_1', previousSecretExpiresAt: null });
    logger.info('a mistake', { previousSecretExpiresAt: 'whsec_c2VjcmV0c2VjcmV0' });
    expect(lines.map((line) => line.previousSecretExpiresAt)).toEqual(['2026-11-24T09:00:00.000Z', null, '[redacted]']);
  });
});
