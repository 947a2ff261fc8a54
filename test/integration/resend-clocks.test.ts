import { randomUUID } from 'node:crypto';
import { BrokerConnection } from '../../libs/broker/index.js';
import { ENTRY_TYPES, HEADERS } from '../../libs/contracts/index.js';
import { type Claim, FailedIndex, ResendInProgressError, ResendService } from '../../libs/failed/index.js';
import { appendClaim } from '../../libs/failed/append.js';
import { silentLogger } from '../../libs/logger/index.js';
import { topologyNames } from '../../libs/topology/index.js';
import { TestBroker, brokerUrl, uniquePrefix } from '../support/broker.js';
import { waitFor } from '../support/wait.js';

const MERCHANT = 'm_clocks';
const AHEAD_MS = 60_000;

describe('claim leases never compare two hosts\' clocks', () => {
  let test: TestBroker;
  let brokerA: BrokerConnection;
  let brokerB: BrokerConnection;
  const prefixes: string[] = [];
  const indexes: FailedIndex[] = [];

  beforeAll(async () => {
    test = await TestBroker.open();
    brokerA = new BrokerConnection({ url: brokerUrl(), name: 'test-clocks-a', logger: silentLogger() });
    brokerB = new BrokerConnection({ url: brokerUrl(), name: 'test-clocks-b', logger: silentLogger() });
    await brokerA.open(10_000);
    await brokerB.open(10_000);
  });

  afterAll(async () => {
    for (const index of indexes) await index.stop();
    await brokerA.close();
    await brokerB.close();
    for (const prefix of prefixes) {
      const names = topologyNames(prefix);
      await test.channel.deleteQueue(names.failed).catch(() => {});
      await test.channel.deleteQueue(names.dispatch).catch(() => {});
    }
    await test.close();
  });

  async function topology(): Promise<string> {
    const prefix = uniquePrefix('clocks');
    prefixes.push(prefix);
    const names = topologyNames(prefix);
    await test.channel.assertQueue(names.failed, { durable: true, arguments: { 'x-queue-type': 'stream' } });
    await test.channel.assertQueue(names.dispatch, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    return prefix;
  }

  async function failure(prefix: string, reference: string): Promise<void> {
    await test.publishRaw(topologyNames(prefix).failed, Buffer.from(JSON.stringify({ merchantId: MERCHANT, event: 'payout', data: { reference } })), {
      messageId: `evt_${reference}`,
      contentType: 'application/json',
      headers: {
        [HEADERS.entryType]: ENTRY_TYPES.failure,
        [HEADERS.merchantId]: MERCHANT,
        [HEADERS.reference]: reference,
        [HEADERS.event]: 'payout',
        [HEADERS.webhookId]: `evt_${reference}`,
      },
    });
  }

  async function replica(broker: BrokerConnection, prefix: string, monotonic?: () => number): Promise<FailedIndex> {
    const index = new FailedIndex(broker, topologyNames(prefix).failed, silentLogger(), { monotonic });
    indexes.push(index);
    await index.start();
    await waitFor('index ready', () => index.ready);
    return index;
  }

  /** A claim as another replica appends it; every index that reads it settles its verdict. */
  async function claim(prefix: string, offsets: number[], fields: Partial<Claim>, readers: FailedIndex[]): Promise<number[][]> {
    const full: Claim = { claimId: randomUUID(), merchantId: MERCHANT, reference: 'r1', at: Date.now(), offsets, ...fields };
    const verdicts = readers.map((index) => index.awaitClaim(full.claimId, 10_000));
    await appendClaim(brokerA, topologyNames(prefix).failed, full, 5_000);
    return Promise.all(verdicts);
  }

  it('decides every claim from the stream alone: a claim written 60 s ahead wins nothing, a named takeover wins everywhere', async () => {
    const prefix = await topology();
    await failure(prefix, 'r1');
    const a = await replica(brokerA, prefix);
    // B's monotonic clock reads an hour more than A's: only differences on one host count.
    const b = await replica(brokerB, prefix, () => performance.now() + 3_600_000);
    const [offset] = await waitFor('indexed', () => a.lookup(MERCHANT, 'r1').length === 1 && b.lookup(MERCHANT, 'r1').length === 1 && a.lookup(MERCHANT, 'r1'));

    const first = randomUUID();
    expect(await claim(prefix, [offset!], { claimId: first }, [a, b])).toEqual([[offset], [offset]]);
    // A replica whose wall clock is 60 s ahead: its `at` is past the lease of the first claim.
    expect(await claim(prefix, [offset!], { at: Date.now() + AHEAD_MS }, [a, b])).toEqual([[], []]);
    // A claimant that saw the first claim's lease run out on its own clock says so; all agree.
    const takeover = randomUUID();
    expect(await claim(prefix, [offset!], { claimId: takeover, takesOver: [first] }, [a, b])).toEqual([[offset], [offset]]);
    // Naming a holder that no longer holds wins nothing.
    expect(await claim(prefix, [offset!], { takesOver: [first] }, [a, b])).toEqual([[], []]);
    expect(a.holdOf(offset!)?.claimId).toBe(takeover);
    expect(b.holdOf(offset!)?.claimId).toBe(takeover);
  });

  it('never lets a replica whose clock is 60 s ahead steal a live resend, and still frees a dead claim after a lease on its own clock', async () => {
    const prefix = await topology();
    const names = topologyNames(prefix);
    await failure(prefix, 'live');
    await failure(prefix, 'dead');
    let advancedMs = 0;
    const a = await replica(brokerA, prefix);
    const b = await replica(brokerB, prefix, () => performance.now() + advancedMs);
    await waitFor('indexed', () => b.lookup(MERCHANT, 'live').length === 1 && b.lookup(MERCHANT, 'dead').length === 1 && a.lookup(MERCHANT, 'dead').length === 1);

    // A's republish is slow (a busy broker): its claim is live while B is asked to resend.
    let letGo!: () => void;
    const held = new Promise<void>((resolve) => (letGo = resolve));
    const slowA = new Proxy(brokerA, {
      get(target, prop, receiverArg) {
        if (prop === 'sendToQueue') {
          return async (queue: string, ...rest: unknown[]) => {
            if (queue === names.dispatch) await held;
            return (target.sendToQueue as (...a: unknown[]) => Promise<void>).call(target, queue, ...rest);
          };
        }
        const value = Reflect.get(target, prop, receiverArg);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as BrokerConnection;
    const resendA = new ResendService(slowA, a, prefix, silentLogger(), { replica: 'a' });
    const resendB = new ResendService(brokerB, b, prefix, silentLogger(), { replica: 'b', now: () => new Date(Date.now() + AHEAD_MS) });

    const byA = resendA.resend(MERCHANT, 'live');
    const [live] = b.lookup(MERCHANT, 'live');
    await waitFor('A\'s claim read by B', () => b.holdOf(live!));
    await expect(resendB.resend(MERCHANT, 'live')).rejects.toThrow(ResendInProgressError);
    letGo();
    expect(await byA).toBe(1);
    await waitFor('resolved on B', () => b.lookup(MERCHANT, 'live').length === 0);
    expect(await test.messageCount(names.dispatch)).toBe(1);

    // A claimant that died before resolving: B frees its entry once B's own clock has run a lease.
    const [dead] = b.lookup(MERCHANT, 'dead');
    await claim(prefix, [dead!], { reference: 'dead', by: 'a replica that died' }, [a, b]);
    await expect(resendB.resend(MERCHANT, 'dead')).rejects.toThrow(ResendInProgressError);
    advancedMs = b.claimLeaseMs;
    expect(await resendB.resend(MERCHANT, 'dead')).toBe(1);
    // A, whose clock has not run the lease, reached the same verdict from the stream.
    await waitFor('resolved on A', () => a.lookup(MERCHANT, 'dead').length === 0);
    expect(await test.messageCount(names.dispatch)).toBe(2);
    // Each republish is a copy of its own: the dispatcher keeps the first copy of a resent entry.
    const copies = (await test.drain(names.dispatch, 2)).map((m) => m.properties.headers?.[HEADERS.copyId]);
    expect(copies.every((id) => typeof id === 'string' && id.length > 0)).toBe(true);
    expect(new Set(copies).size).toBe(2);
  });

  it('holds every claim it replays at start-up for a whole lease from its own start, however old the claim says it is', async () => {
    const prefix = await topology();
    await failure(prefix, 'old');
    const first = await replica(brokerA, prefix);
    const [offset] = await waitFor('indexed', () => first.lookup(MERCHANT, 'old').length === 1 && first.lookup(MERCHANT, 'old'));
    // Written ten minutes ago by its claimant's clock, and never resolved.
    await claim(prefix, [offset!], { reference: 'old', at: Date.now() - 600_000 }, [first]);

    let advancedMs = 0;
    const started = await replica(brokerB, prefix, () => performance.now() + advancedMs);
    expect(started.holdOf(offset!)?.remainingMs).toBeGreaterThan(started.claimLeaseMs - 5_000);
    const resend = new ResendService(brokerB, started, prefix, silentLogger());
    await expect(resend.resend(MERCHANT, 'old')).rejects.toThrow(ResendInProgressError);
    advancedMs = started.claimLeaseMs;
    expect(await resend.resend(MERCHANT, 'old')).toBe(1);
  });
});
