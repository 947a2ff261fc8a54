import { startPortalStack, type PortalStack } from '../support/portal.js';
import { Receiver } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';

/**
 * A merchant's portal session against another merchant's endpoint, named by its id on either of
 * two replicas (issue 56): every endpoint route answers 404 endpoint_not_found and nothing of the
 * other merchant changes, is sent or is shown.
 */
describe("the portal never reaches another merchant's endpoint by its id", () => {
  let stack: PortalStack;
  let receiver: Receiver;

  beforeAll(async () => {
    receiver = await Receiver.start(() => 204);
    stack = await startPortalStack('portal-tenancy', 2);
    await stack.putMerchant('m_mine', `${receiver.url}/mine`);
    await stack.putMerchant('m_theirs', `${receiver.url}/theirs`);
  });

  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  it('answers 404 to reading, changing, rotating, testing and deleting it, and leaves it as it was', async () => {
    const theirs = stack.endpoint('m_theirs');
    const before = { ...stack.dispatcher.merchants.byId('m_theirs')!.endpoints[0]! };
    const requests = receiver.requests.length;
    const mine = await stack.open('m_mine', { permissions: ['resend', 'manage-endpoint', 'manage-secret'] });
    const calls: Array<[string, string, unknown?]> = [
      ['GET', theirs],
      ['PATCH', theirs, { enabled: false, url: `${receiver.url}/stolen` }],
      ['POST', `${theirs}/secret/rotate`, { graceSeconds: 0 }],
      ['POST', `${theirs}/test`, { event: 'payout' }],
      ['DELETE', theirs],
    ];
    for (const [i, api] of stack.apis.entries()) {
      for (const [method, path, body] of calls) {
        const answer = await stack.write(mine, method, path, body, mine.csrf, api);
        expect({ replica: i, method, path, status: answer.status, code: (answer.body as { error: { code: string } | null }).error?.code }).toEqual({ replica: i, method, path, status: 404, code: 'endpoint_not_found' });
      }
    }
    // Their endpoint is not in my list, and theirs is as it was: same URL, state and secret, nothing sent to it.
    const listed = await stack.write(mine, 'GET', '/portal/api/endpoints');
    expect((listed.body as { data: { endpoints: Array<{ id: string }> } }).data.endpoints.map((e) => e.id)).toEqual([stack.endpoint('m_mine').split('/').pop()]);
    const sentToMine = await stack.write(mine, 'POST', `${stack.endpoint('m_mine')}/test`, { event: 'payout' });
    expect(sentToMine.status).toBe(202);
    await waitFor('my own test event delivered', () => receiver.requests.slice(requests).some((r) => r.path.endsWith('/mine')), 10_000);
    expect(receiver.requests.slice(requests).filter((r) => !r.path.endsWith('/mine'))).toEqual([]);
    const after = stack.dispatcher.merchants.byId('m_theirs')!.endpoints;
    expect(after).toHaveLength(1);
    expect({ ...after[0]! }).toEqual(before);
  });
});
