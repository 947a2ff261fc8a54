import { HEADERS, sampleEvent } from '../../libs/contracts/index.js';
import { isBlockedAddress } from '../../libs/http/index.js';
import { type Harness, startHarness, testMerchant } from '../support/harness.js';
import { Receiver } from '../support/receiver.js';

/**
 * Every blocked class is refused before any connection, so these addresses are never contacted:
 * each test first asserts the guard blocks its address and sends nothing if it does not.
 */
describe('outbound safety with ALLOW_PRIVATE_TARGETS=false', () => {
  let receiver: Receiver;
  let harness: Harness;
  let port: number;
  const targets: Array<[string, (port: number) => string, string]> = [
    ['loopback IPv4', (p) => `http://127.0.0.1:${p}/hooks`, '127.0.0.1'],
    ['loopback IPv4 elsewhere in 127/8', (p) => `http://127.9.9.9:${p}/hooks`, '127.9.9.9'],
    ['loopback IPv6', (p) => `http://[::1]:${p}/hooks`, '::1'],
    ['IPv4-mapped loopback', (p) => `http://[::ffff:127.0.0.1]:${p}/hooks`, '::ffff:7f00:1'],
    ['unspecified', (p) => `http://0.0.0.0:${p}/hooks`, '0.0.0.0'],
    ['private 10/8', () => 'http://10.1.2.3/hooks', '10.1.2.3'],
    ['private 172.16/12', () => 'http://172.20.0.5/hooks', '172.20.0.5'],
    ['private 192.168/16', () => 'http://192.168.1.10/hooks', '192.168.1.10'],
    ['carrier-grade NAT 100.64/10', () => 'http://100.64.0.7/hooks', '100.64.0.7'],
    ['link-local and cloud metadata', () => 'http://169.254.169.254/latest/meta-data', '169.254.169.254'],
    ['IPv6 unique local', () => 'http://[fd00:ec2::254]/hooks', 'fd00:ec2::254'],
    ['IPv6 link-local', () => 'http://[fe80::1]/hooks', 'fe80::1'],
    ['IPv6 site-local fec0::/10 (deprecated, still routed privately)', () => 'http://[fec0::1]/hooks', 'fec0::1'],
    ['any IPv4-mapped IPv6 address, a public one too', () => 'http://[::ffff:8.8.8.8]/hooks', '::ffff:808:808'],
    ['IPv4-translated (SIIT, ::ffff:0:0:0/96) metadata address', () => 'http://[::ffff:0:169.254.169.254]/hooks', '::ffff:0:a9fe:a9fe'],
    ['Azure\'s platform endpoint (wireserver)', () => 'http://168.63.129.16/hooks', '168.63.129.16'],
  ];
  const merchants = targets.map(([name], i) => testMerchant(`m_ssrf_${i}`, 'http://placeholder', {}));
  const viaDns = testMerchant('m_ssrf_dns', 'http://placeholder');

  beforeAll(async () => {
    receiver = await Receiver.start();
    port = Number(new URL(receiver.url).port);
    targets.forEach(([, url], i) => (merchants[i]!.endpoints[0]!.url = url(port)));
    viaDns.endpoints[0]!.url = `http://localhost:${port}/hooks`;
    harness = await startHarness({ name: 'ssrf', merchants: [...merchants, viaDns], retryDelaysMs: [100, 100], allowPrivateTargets: false });
  });

  afterAll(async () => {
    await harness?.close();
    await receiver?.close();
  });

  let seen = 0;
  async function failedEntryFor(merchantId: string) {
    await harness.publisher.publish(sampleEvent('payout', merchantId));
    seen++;
    const entries = await harness.test.readStream(harness.names.failed, seen);
    const entry = entries.find((e) => e.properties.headers?.[HEADERS.merchantId] === merchantId);
    expect(entry).toBeDefined();
    return entry!;
  }

  it.each(targets.map(([name, , address], i) => [name, address, i] as const))(
    'refuses %s (%s) at once, without retrying, and parks it in failed with the reason',
    async (_name, address, i) => {
      const host = new URL(merchants[i]!.endpoints[0]!.url).hostname.replace(/^\[|\]$/g, '');
      expect(isBlockedAddress(host)).toBe(true); // never send if the guard would let it through
      const entry = await failedEntryFor(merchants[i]!.id);
      expect(entry.properties.headers![HEADERS.attempts]).toBe(1);
      expect(entry.properties.headers![HEADERS.lastError]).toBe(
        `blocked: ${address} resolves to ${address}, a loopback, private, link-local or reserved address (ALLOW_PRIVATE_TARGETS=false)`,
      );
      expect(receiver.requests).toHaveLength(0);
    },
  );

  it('checks the address a hostname resolves to at connect time (localhost)', async () => {
    const entry = await failedEntryFor(viaDns.id);
    expect(entry.properties.headers![HEADERS.lastError]).toMatch(
      /^blocked: localhost resolves to (127\.0\.0\.1|::1), a loopback, private, link-local or reserved address/,
    );
    expect(receiver.requests).toHaveLength(0);
  });
});

describe('the address guard', () => {
  it.each(['64:ff9b:1::a14:311', '2002:a14:311::1', '2001:0:4136:e378:8000:63bf:f5eb:fcee', '::10.20.3.17', '::', '192.88.99.1', '::ffff:0:7f00:1'])(
    'refuses %s, an IPv6 range that wraps an IPv4 address (or 6to4\'s relay)',
    (address) => {
      expect(isBlockedAddress(address)).toBe(true);
    },
  );

  it.each(['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '172.32.0.1', '100.128.0.1', '192.169.0.1'])('lets public %s through', (address) => {
    expect(isBlockedAddress(address)).toBe(false);
  });
});
