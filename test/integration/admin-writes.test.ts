import pg from 'pg';
import type { ApiProgram } from '../../apps/api/program.js';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type Answer, call, expectDocumented, seen, startTestApi, waitReady } from '../support/api.js';
import { adminReplicas, code, data } from '../support/admin-replicas.js';
import { firstEndpointPath, patchFirstEndpoint, putMerchantWithEndpoint } from '../support/merchant-endpoints.js';
import { verifies } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/** Admin writes a dashboard's backend can repeat safely, and the rules that keep merchants apart. */
describe('admin writes: rotations, idempotency keys, PATCH, public keys and the admin port', () => {
  const stack = adminReplicas('admin-writes');
  const send = (api: ApiProgram, method: string, path: string, body: unknown, headers: Record<string, string> = {}) => stack.send(api, method, path, body, headers);
  const put = (api: ApiProgram, id: string, body: unknown, headers?: Record<string, string>) => send(api, 'PUT', `/admin/merchants/${id}`, body, headers);
  const patch = (api: ApiProgram, id: string, body: unknown, headers?: Record<string, string>) => send(api, 'PATCH', `/admin/merchants/${id}`, body, headers);
  /** The merchant's first endpoint's PATCH and rotation: its secret, URL, events and state are the endpoint's. */
  const patchEndpoint = (api: ApiProgram, id: string, body: unknown) => patchFirstEndpoint(api, id, body, stack.auth);
  const rotate = async (api: ApiProgram, id: string, body: unknown, headers?: Record<string, string>) =>
    send(api, 'POST', `${await firstEndpointPath(api, id, stack.auth)}/secret/rotate`, body, headers);
  const withEndpoint = (api: ApiProgram, id: string, body: { publicKey: string; url: string; events?: string[]; orderByReference?: boolean }) => putMerchantWithEndpoint(api, id, body, stack.auth);
  const get = (api: ApiProgram, id: string) => stack.send(api, 'GET', `/admin/merchants/${id}`, undefined);
  const message = (answer: Answer) => (answer.body as { message: string }).message;

  async function delivered(merchantId: string) {
    const { messageId } = await stack.publisher.publish(sampleEvent('payout', merchantId));
    return waitFor('webhook delivered', () => stack.receiver.requests.find((r) => r.headers['webhook-id'] === messageId), 10_000);
  }

  it('keeps every secret issued within its grace signing until its own expiry, across rotations in a row', async () => {
    const created = await withEndpoint(stack.apiA, 'm_rot', { publicKey: 'pk_rot_00001', url: `${stack.receiver.url}/m_rot` });
    expect(created.status).toBe(201);
    const s0 = data(created).secret as string;
    // The first rotation gives s0 a short grace, the second gives s1 a long one.
    const first = await rotate(stack.apiA, 'm_rot', { graceSeconds: 3 });
    const s1 = data(first).secret as string;
    const second = await rotate(stack.apiB, 'm_rot', { graceSeconds: 600 });
    expect(second.status).toBe(200);
    const s2 = data(second).secret as string;
    await waitFor('dispatcher has s2', () => stack.dispatcher.merchants.byId('m_rot')?.endpoints[0]?.secret === s2, 5_000);

    const during = await delivered('m_rot');
    expect([s0, s1, s2].map((s) => verifies(s, during))).toEqual([true, true, true]);
    const view = data(await get(stack.apiB, 'm_rot')).endpoints[0];
    expect(view.previousSecrets).toHaveLength(2);
    expect(view.previousSecretExpiresAt).toBe(data(second).previousSecretExpiresAt);

    await waitFor('s0 expired', () => Date.now() > Date.parse(data(first).previousSecretExpiresAt) + 10, 5_000, 50);
    const after = await delivered('m_rot');
    expect([s0, s1, s2].map((s) => verifies(s, after))).toEqual([false, true, true]);
  });

  it('refuses a rotation that would keep more than three old secrets signing, and never drops one in use', async () => {
    await rotate(stack.apiA, 'm_rot', { graceSeconds: 600 });
    const third = await rotate(stack.apiA, 'm_rot', { graceSeconds: 600 });
    expect(third.status).toBe(200);
    expect(data(await get(stack.apiA, 'm_rot')).endpoints[0].previousSecrets).toHaveLength(3);
    const refused = await rotate(stack.apiB, 'm_rot', { graceSeconds: 600 });
    expect(code(refused)).toEqual([409, 'too_many_secrets']);
    expect(message(refused)).toContain('graceSeconds 0');
    // The bound is the endpoint's (its other endpoints rotate freely): the message names it.
    const endpointId = data(await get(stack.apiA, 'm_rot')).endpoints[0].id as string;
    expect(message(refused)).toContain(`endpoint ${endpointId} `);
    // Rotating with no grace replaces only the current secret; the three in grace keep signing.
    const now = await rotate(stack.apiB, 'm_rot', { graceSeconds: 0 });
    expect(now.status).toBe(200);
    expect(data(await get(stack.apiA, 'm_rot')).endpoints[0].previousSecrets).toHaveLength(3);
  });

  it('answers a repeated Idempotency-Key with the first answer, secret included, on another replica and after a restart', async () => {
    const body = { publicKey: 'pk_idem_0001' };
    const first = await put(stack.apiA, 'm_idem', body, { 'idempotency-key': 'create-m_idem-1' });
    expect(first.status).toBe(201);
    const again = await put(stack.apiB, 'm_idem', body, { 'idempotency-key': 'create-m_idem-1' });
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');

    // The endpoint's creation too: a repeat on the other replica is the first answer, its secret included.
    const endpoint = { url: `${stack.receiver.url}/m_idem` };
    const created = await send(stack.apiA, 'POST', '/admin/merchants/m_idem/endpoints', endpoint, { 'idempotency-key': 'create-m_idem-ep-1' });
    expect(created.status).toBe(201);
    expect(data(created).secret).toMatch(/^whsec_/);
    const createdAgain = await send(stack.apiB, 'POST', '/admin/merchants/m_idem/endpoints', endpoint, { 'idempotency-key': 'create-m_idem-ep-1' });
    expect(createdAgain.body).toEqual(created.body);

    // Rotations: a double-submitted one rotates once and both answers carry the same secret.
    const [r1, r2] = await Promise.all([
      rotate(stack.apiA, 'm_idem', { graceSeconds: 60 }, { 'idempotency-key': 'rotate-m_idem-1' }),
      rotate(stack.apiB, 'm_idem', { graceSeconds: 60 }, { 'idempotency-key': 'rotate-m_idem-1' }),
    ]);
    expect([r1.status, r2.status]).toEqual([200, 200]);
    expect(data(r1).secret).toBe(data(r2).secret);
    await waitFor('dispatcher has the rotation', () => stack.dispatcher.merchants.byId('m_idem')?.endpoints[0]?.secret === data(r1).secret, 5_000);
    // Replica A answers GET from memory, a notification behind the replica that wrote.
    await waitFor('replica A shows one secret in its grace', async () => data(await get(stack.apiA, 'm_idem')).endpoints[0]?.previousSecrets.length === 1, 5_000);

    await stack.restartB();
    const afterRestart = await rotate(stack.apiB, 'm_idem', { graceSeconds: 60 }, { 'idempotency-key': 'rotate-m_idem-1' });
    expect(afterRestart.body).toEqual(r1.body);

    // The same key for another request is a client bug: say so, change nothing.
    const reused = await put(stack.apiB, 'm_idem', { ...body, publicKey: 'pk_idem_0002' }, { 'idempotency-key': 'create-m_idem-1' });
    expect(code(reused)).toEqual([422, 'idempotency_key_reused']);
    expect(code(await put(stack.apiB, 'm_idem', body, { 'idempotency-key': 'x'.repeat(300) }))).toEqual([400, 'invalid_idempotency_key']);
    expect(data(await get(stack.apiA, 'm_idem')).publicKey).toBe('pk_idem_0001');
  });

  it('keeps the key of a write that changed nothing: its repeat after another write is the first answer, and writes nothing', async () => {
    await put(stack.apiA, 'm_noop', { publicKey: 'pk_noop_0001' });
    const first = await put(stack.apiA, 'm_noop', { publicKey: 'pk_noop_0001' }, { 'idempotency-key': 'noop-1' });
    expect([first.status, first.headers.get('etag')]).toEqual([200, '"1"']);
    expect((await put(stack.apiB, 'm_noop', { publicKey: 'pk_noop_0002' })).status).toBe(200);
    const again = await put(stack.apiB, 'm_noop', { publicKey: 'pk_noop_0001' }, { 'idempotency-key': 'noop-1' });
    expect([again.status, again.headers.get('idempotent-replayed'), again.headers.get('etag')]).toEqual([200, 'true', '"1"']);
    expect(code(await put(stack.apiB, 'm_noop', { publicKey: 'pk_noop_0003' }, { 'idempotency-key': 'noop-1' }))).toEqual([422, 'idempotency_key_reused']);
    expect(await stack.db.query('SELECT public_key, version FROM merchants WHERE id = $1', ['m_noop'])).toEqual([{ public_key: 'pk_noop_0002', version: '2' }]);
  });

  it('answers 400 for a value PostgreSQL cannot keep (an unpaired surrogate), and 503 to a write that waited too long for the row', async () => {
    await put(stack.apiA, 'm_odd', { publicKey: 'pk_odd_0001' });
    for (const method of ['PUT', 'PATCH']) {
      const odd = await call(stack.apiA, '/admin/merchants/m_odd', { method, headers: stack.auth, body: '{"publicKey":"pk_odd_\\ud800001"}' });
      expect(code(odd)).toEqual([400, 'invalid_settings']);
    }
    // Another transaction holds the merchant's row past the API's 10 s statement timeout: busy, not broken.
    const holder = new pg.Client({ connectionString: stack.db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT id FROM merchants WHERE id = $1 FOR UPDATE', ['m_odd']);
      const waited = await patch(stack.apiB, 'm_odd', { publicKey: 'pk_odd_0002' });
      expect(code(waited)).toEqual([503, 'service_unavailable']);
      expect(waited.headers.get('retry-after')).not.toBeNull();
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
    expect(data(await get(stack.apiA, 'm_odd')).publicKey).toBe('pk_odd_0001');
  }, 30_000);

  it('gives a public key to one merchant only, when two replicas race to PUT it', async () => {
    for (let round = 0; round < 5; round++) {
      const key = `pk_race_${round}_0000`;
      const [onA, onB] = await Promise.all([
        put(stack.apiA, `m_race_a${round}`, { publicKey: key }),
        put(stack.apiB, `m_race_b${round}`, { publicKey: key }),
      ]);
      expect([onA.status, onB.status].sort()).toEqual([201, 409]);
      const loser = onA.status === 409 ? onA : onB;
      expect(code(loser)).toEqual([409, 'public_key_taken']);
      const winner = onA.status === 201 ? `m_race_a${round}` : `m_race_b${round}`;
      const other = onA.status === 201 ? `m_race_b${round}` : `m_race_a${round}`;
      // A replica answers GET from memory, a notification behind the replica that wrote.
      for (const api of [stack.apiA, stack.apiB]) {
        await waitFor(`the winner seen by every replica`, async () => (await get(api, winner)).status === 200, 2_000, 10);
        expect((await get(api, other)).status).toBe(404);
      }
      await waitFor('dispatcher has the winner', () => stack.dispatcher.merchants.byPublicKey(key)?.id === winner, 5_000);
      expect(stack.dispatcher.merchants.byId(other)).toBeUndefined();
    }
  });

  it('gives a public key its last owner let go of, to a replica that has not heard of the change yet: PostgreSQL decides, not the replica\'s memory', async () => {
    expect((await put(stack.apiA, 'm_swap_a', { publicKey: 'pk_swap_0001' })).status).toBe(201);
    await waitFor('replica B knows the key taken', async () => (await get(stack.apiB, 'm_swap_a')).status === 200, 5_000, 10);
    // The key let go of in PostgreSQL, with no notification: replica B still holds it as m_swap_a's (until its 10 s poll).
    await stack.db.query("UPDATE merchants SET public_key = 'pk_swap_0002', version = version + 1 WHERE id = 'm_swap_a'");
    expect(data(await get(stack.apiB, 'm_swap_a')).publicKey).toBe('pk_swap_0001');
    const taken = await put(stack.apiB, 'm_swap_b', { publicKey: 'pk_swap_0001' });
    expect(taken.status).toBe(201);
    // And one still held is refused by the unique index alone, on any replica.
    expect(code(await put(stack.apiB, 'm_swap_c', { publicKey: 'pk_swap_0002' }))).toEqual([409, 'public_key_taken']);
  });

  it('changes with PATCH only what the body names: disabling keeps the URL, the events and the secret', async () => {
    const created = await withEndpoint(stack.apiA, 'm_patch', { publicKey: 'pk_patch_001', url: `${stack.receiver.url}/m_patch`, events: ['payout'] });
    const { secret, id: endpointId } = data(created);
    const disabled = await patchEndpoint(stack.apiB, 'm_patch', { enabled: false });
    expect(disabled.status).toBe(200);
    const endpointView = { id: endpointId, description: null, url: `${stack.receiver.url}/m_patch`, enabled: false, events: ['payout'], previousSecretExpiresAt: null, previousSecrets: [], disabledReason: 'manual', disabledAt: expect.any(String), failingSince: null, orderByReference: false, maxPerSecond: null, currentPerSecond: null };
    expect(data(disabled)).toEqual(endpointView);
    // The merchant shows its endpoints, read-only.
    await waitFor('replica A shows it disabled', async () => data(await get(stack.apiA, 'm_patch')).endpoints[0]?.enabled === false, 5_000);
    expect(data(await get(stack.apiA, 'm_patch'))).toEqual({ id: 'm_patch', publicKey: 'pk_patch_001', endpoints: [endpointView] });
    await waitFor('dispatcher sees it disabled', () => stack.dispatcher.merchants.byId('m_patch')?.endpoints[0]?.enabled === false, 5_000);
    expect(stack.dispatcher.merchants.byId('m_patch')!.endpoints[0]).toMatchObject({ secret, events: ['payout'] });

    const allEvents = await patchEndpoint(stack.apiA, 'm_patch', { enabled: true, events: null });
    expect(data(allEvents).events).toEqual(['charge.completed', 'payout', 'refund.completed']);
    const rekeyed = await patch(stack.apiA, 'm_patch', { publicKey: 'pk_patch_002' });
    expect(data(rekeyed)).toMatchObject({ publicKey: 'pk_patch_002', endpoints: [{ id: endpointId, enabled: true }] });

    // The merchant's PATCH names its own settings only: the old single webhook is refused, named.
    const old = await patch(stack.apiA, 'm_patch', { webhook: { enabled: false } });
    expect(code(old)).toEqual([400, 'invalid_settings']);
    expect(message(old)).toBe('unknown field webhook; allowed: publicKey');
    expect(code(await patch(stack.apiA, 'm_patch_nobody', { publicKey: 'pk_patch_009' }))).toEqual([404, 'merchant_not_found']);
    expect(code(await patch(stack.apiA, 'm_patch', { publicKey: 'pk_rot_00001' }))).toEqual([409, 'public_key_taken']);
  });

  it('turns order per reference on when an endpoint is made or PATCHed, keeps it across other changes, and the dispatchers hold it', async () => {
    const created = await withEndpoint(stack.apiA, 'm_ordered', { publicKey: 'pk_order_0001', url: `${stack.receiver.url}/m_ordered`, orderByReference: true });
    expect(created.status).toBe(201);
    expect(data(created).orderByReference).toBe(true);
    await waitFor('dispatcher orders it', () => stack.dispatcher.merchants.byId('m_ordered')?.endpoints[0]?.orderByReference === true, 5_000);
    const disabled = await patchEndpoint(stack.apiB, 'm_ordered', { enabled: false });
    expect(data(disabled)).toMatchObject({ enabled: false, orderByReference: true });
    const off = await patchEndpoint(stack.apiA, 'm_ordered', { orderByReference: false });
    expect(data(off).orderByReference).toBe(false);
    await waitFor('dispatcher no longer orders it', () => stack.dispatcher.merchants.byId('m_ordered')?.endpoints[0]?.orderByReference === undefined, 5_000);
    const bad = await patchEndpoint(stack.apiA, 'm_ordered', { orderByReference: 'yes' });
    expect(code(bad)).toEqual([400, 'invalid_settings']);
    expect(message(bad)).toBe('orderByReference must be true or false');
  });

  it('turns a new endpoint on when enabled is left out, and names the field and what it allows in every refusal', async () => {
    const created = await withEndpoint(stack.apiA, 'm_msg', { publicKey: 'pk_msg_00001', url: `${stack.receiver.url}/m_msg` });
    expect(created.status).toBe(201);
    expect(data(created).enabled).toBe(true);

    const refusal = async (body: unknown, expected: string, path = '/admin/merchants/m_msg_bad', method = 'PUT') => {
      const answer = await send(stack.apiB, method, path, body);
      expect(code(answer)).toEqual([400, 'invalid_settings']);
      expect(message(answer)).toBe(expected);
    };
    await refusal({}, 'publicKey is required');
    await refusal({ publicKey: 12345678 }, 'publicKey must be a string');
    await refusal({ publicKey: 'pk_msg_00002', webhook: { url: 'https://x.example' } }, 'unknown field webhook; allowed: publicKey');
    await refusal({ publicKey: 'pk_msg_00002', extra: 1 }, 'unknown field extra; allowed: publicKey');
    await refusal([], 'body must be a JSON object');
    const endpoints = '/admin/merchants/m_msg/endpoints';
    await refusal({}, 'url is required', endpoints, 'POST');
    await refusal({ url: 'https://x.example', enabled: 'yes' }, 'enabled must be true or false', endpoints, 'POST');
    await refusal({ url: 'https://x.example', events: ['charge.failed'] }, 'events: each event must be one of charge.completed, payout, refund.completed', endpoints, 'POST');
    const rotation = await rotate(stack.apiB, 'm_msg', { graceSeconds: '60' });
    expect(message(rotation)).toBe('graceSeconds must be a number of seconds');
  });

  it('serves the admin API only on ADMIN_PORT when it is set', async () => {
    const separate = await startTestApi(stack.prefix, [], {}, { ...stack.envA, ADMIN_PORT: '0' });
    try {
      await waitReady(separate);
      expect(separate.adminPort).toBeGreaterThan(0);
      expect(separate.adminPort).not.toBe(separate.port);
      const onPublic = await get(separate, 'm_msg');
      expect(code(onPublic)).toEqual([404, 'route_not_found']);
      const onAdmin = await get({ ...separate, port: separate.adminPort! }, 'm_msg');
      expect(onAdmin.status).toBe(200);
      expect(data(onAdmin).id).toBe('m_msg');
      // The merchant-facing port still serves health and the resend API.
      expect((await call(separate, '/healthz', { method: 'GET' })).status).toBe(200);
      // A second API asking for the same ADMIN_PORT fails to start, naming the cause.
      await expect(startTestApi(stack.prefix, [], {}, { ...stack.envA, ADMIN_PORT: String(separate.adminPort) })).rejects.toThrow(/EADDRINUSE/);
    } finally {
      await separate.stop();
    }
  });

  it('documents every answer it gave in the OpenAPI file', () => {
    const statuses = expectDocumented(seen);
    for (const status of ['200', '400', '404', '409']) expect(statuses).toContain(`/admin/merchants/{merchantId} ${status}`);
    expect(statuses).toContain('/admin/merchants/{merchantId} 422');
  });
});
