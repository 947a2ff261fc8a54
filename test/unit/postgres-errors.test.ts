import { describe, expect, it } from '@jest/globals';
import { isTransient } from '../../libs/delivery-store/index.js';
import { isDataRefusal, isRefusal } from '../../libs/delivery-store/refusals.js';
import { isUnavailable } from '../../libs/merchants/pg-directory.js';
import { awaitSchema } from '../../libs/migrations/gate.js';
import { REQUIRED_VERSION } from '../../libs/migrations/files.js';
import { silentLogger } from '../../libs/logger/index.js';

const withCode = (code: string): Error => Object.assign(new Error(code), { code });

describe('which PostgreSQL errors are an outage and which a refusal of the data', () => {
  it('takes a socket error for the connection, never for the data, though EPIPE has the shape of a SQLSTATE', () => {
    for (const code of ['EPIPE', 'ECONNRESET', 'ECONNREFUSED', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN']) {
      expect([code, isRefusal(withCode(code), 10)]).toEqual([code, false]);
      expect([code, isTransient(withCode(code))]).toEqual([code, true]);
    }
    expect(isTransient(new Error('Connection terminated unexpectedly'))).toBe(true);
    // As Node's own sockets make them: an object of another realm than the test's, not `instanceof Error` here.
    expect(isTransient({ message: 'connect ECONNREFUSED 127.0.0.1:1', code: 'ECONNREFUSED', errno: -111 })).toBe(true);
    expect(isTransient({ message: 'Connection terminated' })).toBe(true);
  });

  it('waits through a busy database (a timeout, a lock, a deadlock, a shutdown) and not through a wrong password, a missing database or bad data', () => {
    for (const code of ['57014', '55P03', '40P01', '40001', '57P01', '57P03', '53300', '08006', 'XX000', '25006']) expect([code, isTransient(withCode(code))]).toEqual([code, true]);
    // A write on a standby (a failover under way) is the API's 503 with Retry-After, not a 500.
    expect(isUnavailable(withCode('25006'))).toBe(true);
    expect(isTransient(withCode('25P02'))).toBe(false);
    for (const code of ['28P01', '3D000', '22P02', '22021', '23505', '42P01', 'P0001', 'ERR_INVALID_ARG_TYPE']) expect([code, isTransient(withCode(code))]).toEqual([code, false]);
    expect(isRefusal(withCode('22P05'), 1)).toBe(true);
    // The merchant store answers 503 for a deadlock (try again), as for a lock wait past its timeout.
    expect(isUnavailable(withCode('40P01'))).toBe(true);
    expect(isUnavailable(new TypeError('x'))).toBe(false);
  });

  it("takes a row's refusal (a value, a constraint, a trigger's RAISE or ASSERT) apart from an outage and from a rule that refuses every row", () => {
    for (const code of ['22P02', '22P05', '23514', '23505', '54000', 'P0001', 'P0004']) expect([code, isDataRefusal(withCode(code))]).toEqual([code, true]);
    for (const code of ['57014', '55P03', '40P01', '57P01', '08006', 'XX000', '42501', '42883', '28P01', 'ECONNREFUSED', 'EPIPE']) expect([code, isDataRefusal(withCode(code))]).toEqual([code, false]);
    expect(isDataRefusal(new Error('Connection terminated unexpectedly'))).toBe(false);
    // The recorder's rule is the same: a revoked grant or a missing table is held, never set aside.
    for (const code of ['42501', '42883', '42P01', '0A000', '25P02']) expect([code, isRefusal(withCode(code), 10)]).toEqual([code, false]);
    for (const code of ['22008', '23505', '54000', 'P0001', '21000']) expect([code, isRefusal(withCode(code), 1)]).toEqual([code, true]);
  });

  it('has a program starting up wait through a schema check that timed out, as through one that could not connect', async () => {
    let calls = 0;
    const db = {
      async query(text: string) {
        if (calls++ === 0) throw withCode('57014');
        return { rows: text.includes('to_regclass') ? [{ present: true }] : [{ version: REQUIRED_VERSION }] };
      },
    };
    await expect(awaitSchema(db as never, silentLogger())).resolves.toBeUndefined();
    expect(calls).toBeGreaterThan(1);
  }, 10_000);

  it('has a program starting up stop at once on a missing database or role, naming DATABASE_URL', async () => {
    for (const [code, message] of [['3D000', 'database "webhooks" does not exist'], ['28P01', 'password authentication failed for user "webhooks"']]) {
      const db = { query: async () => Promise.reject(Object.assign(new Error(message), { code })) };
      await expect(awaitSchema(db as never, silentLogger())).rejects.toThrow(`cannot read the database schema version: ${message} (DATABASE_URL)`);
    }
  });
});
