import { merchantsCli } from '../support/merchants-cli.js';
import { waitFor } from '../support/wait.js';

/** `webhooks merchants endpoints …` on the merchants table, seen by a running program's directory. */
describe('webhooks merchants endpoints (operator CLI)', () => {
  const fixture = merchantsCli('cli-endpoints', { MAX_ENDPOINTS_PER_MERCHANT: '2' });
  const { cli } = fixture;

  it("adds an endpoint with its own secret, changes, rotates and deletes it, and a running program applies each", async () => {
    expect((await cli('set', 'm_cep', '--public-key', 'pk_cli_ep_0001')).code).toBe(0);
    const added = await cli('endpoints', 'add', 'm_cep', '--url', 'https://hooks.example.com/orders', '--events', 'payout', '--description', 'orders');
    expect(added.code).toBe(0);
    const id = /\b(ep_[A-Za-z0-9_-]+)\b/.exec(added.stdout)?.[1];
    const secret = /webhook secret: (whsec_\S+)/.exec(added.stdout)?.[1];
    expect(id).toBeDefined();
    await waitFor('program has the endpoint', () => fixture.program.byId('m_cep')?.endpoints.find((e) => e.id === id)?.secret === secret, 15_000);
    expect(fixture.program.byId('m_cep')!.endpoints[0]).toMatchObject({ url: 'https://hooks.example.com/orders', events: ['payout'], description: 'orders', enabled: true });

    const off = await cli('endpoints', 'set', 'm_cep', id!, '--disable', '--all-events');
    expect(off.code).toBe(0);
    await waitFor('program sees it off', () => fixture.program.byId('m_cep')?.endpoints[0]?.enabled === false, 15_000);
    expect(fixture.program.byId('m_cep')!.endpoints[0]).toMatchObject({ disabledReason: 'manual' });
    expect(fixture.program.byId('m_cep')!.endpoints[0]!.events).toBeUndefined();

    const rotated = await cli('endpoints', 'rotate-secret', 'm_cep', id!, '--grace', '0');
    expect(rotated.code).toBe(0);
    const next = /webhook secret: (whsec_\S+)/.exec(rotated.stdout)?.[1];
    expect(next).not.toBe(secret);
    await waitFor('program signs with the new secret', () => fixture.program.byId('m_cep')?.endpoints[0]?.secret === next, 15_000);

    const listed = await cli('endpoints', 'list', 'm_cep', '--json');
    expect(JSON.parse(listed.stdout)).toEqual([expect.objectContaining({ id, enabled: false, disabledReason: 'manual' })]);
    expect(listed.stdout).not.toContain('whsec_');

    expect((await cli('endpoints', 'delete', 'm_cep', id!)).code).toBe(0);
    await waitFor('program no longer has it', () => fixture.program.byId('m_cep')?.endpoints.length === 0, 15_000);
  });

  it('refuses, with exit 2, a URL the merchant already sends to and an endpoint past MAX_ENDPOINTS_PER_MERCHANT, naming it', async () => {
    expect((await cli('set', 'm_lim', '--public-key', 'pk_cli_ep_0003')).code).toBe(0);
    expect((await cli('endpoints', 'add', 'm_lim', '--url', 'https://hooks.example.com/one')).code).toBe(0);
    const same = await cli('endpoints', 'add', 'm_lim', '--url', 'https://hooks.example.com/one');
    expect(same.code).toBe(2);
    expect(same.stderr).toContain('already sends to this URL');
    // MAX_ENDPOINTS_PER_MERCHANT is 2 here: a second is taken, a third refused.
    expect((await cli('endpoints', 'add', 'm_lim', '--url', 'https://hooks.example.com/two')).code).toBe(0);
    const more = await cli('endpoints', 'add', 'm_lim', '--url', 'https://hooks.example.com/three');
    expect(more.code).toBe(2);
    expect(more.stderr).toContain('MAX_ENDPOINTS_PER_MERCHANT: 2');
  });

  it('exits 3 for an unknown merchant or endpoint and 2 for a refused option', async () => {
    expect((await cli('endpoints', 'list', 'm_nobody')).code).toBe(3);
    expect((await cli('set', 'm_cep2', '--public-key', 'pk_cli_ep_0002')).code).toBe(0);
    const missing = await cli('endpoints', 'delete', 'm_cep2', 'ep_missing_1');
    expect(missing.code).toBe(3);
    expect(missing.stderr).toContain('has no endpoint ep_missing_1');
    expect((await cli('endpoints', 'add', 'm_cep2', '--url', 'https://hooks.example.com/x', '--events', 'charge.failed')).code).toBe(2);
    // An empty list is no list (the admin API refuses "events": [] too), not every event.
    const none = await cli('endpoints', 'add', 'm_cep2', '--url', 'https://hooks.example.com/none', '--events', '');
    expect([none.code, none.stderr]).toEqual([2, expect.stringContaining('--events takes at least one of')]);
    expect((await cli('endpoints', 'set', 'm_cep2', 'ep_missing_1')).code).toBe(2);
  });
});
