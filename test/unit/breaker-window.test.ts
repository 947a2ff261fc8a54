import { EndpointGuards } from '../../apps/dispatcher/stages/endpoint-guards.js';
import { endpointOf } from '../../apps/dispatcher/stages/endpoint-key.js';
import { BREAKER } from '../../apps/dispatcher/dispatcher.js';

const options = { maxInFlight: 1, failureThreshold: BREAKER.threshold, failureWindow: BREAKER.window, cooldownMs: 30_000, maxCooldownMs: 600_000 };
const key = endpointOf('m_flaky', 'ep_flaky', 'https://flaky.example/hook');

/** One attempt; returns the cooldown its failure opens the circuit's row for (0: none). */
async function attempt(guards: EndpointGuards, failed: boolean): Promise<number> {
  const admission = await guards.acquire(key, { merchantId: 'm_flaky', canDefer: false, force: false }, () => false);
  if (admission?.kind !== 'send') throw new Error(`expected to send, got ${admission?.kind}`);
  return admission.release(failed ? 'failed' : 'succeeded', failed ? 'HTTP 500' : undefined);
}

/** The attempts (true: failed) in order; the 1-based number of the first whose failure opens the circuit, 0 for none. */
async function opensAt(outcomes: boolean[]): Promise<number> {
  const guards = new EndpointGuards(options);
  for (const [i, failed] of outcomes.entries()) if ((await attempt(guards, failed)) > 0) return i + 1;
  return 0;
}

const ok = (n: number) => Array<boolean>(n).fill(false);
const failing = (n: number) => Array<boolean>(n).fill(true);

describe("the breaker: the threshold's failures in a row open a circuit when most recent answers failed too", () => {
  it('opens a new endpoint at its fifth failure in a row, as before', async () => {
    expect(await opensAt(failing(8))).toBe(5);
  });

  it('does not open for five failures in a row of an endpoint that fails one request in ten', async () => {
    // Seen at a high rate (a tenth failing at random: five in a row every few seconds), the circuit
    // opened and held every webhook of the endpoint for its cooldown each time.
    const flaky = [...ok(9), true, ...ok(9), true, ...ok(4), ...failing(5), ...ok(9), true];
    expect(await opensAt(flaky)).toBe(0);
  });

  it('opens an endpoint that answered until now once half of its last 20 answers failed: a dead endpoint still opens', async () => {
    expect(await opensAt([...ok(40), ...failing(20)])).toBe(50);
  });
});
