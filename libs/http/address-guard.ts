import { type LookupAddress, promises as dns } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { NamedError } from '../runtime/named-error.js';

/**
 * Addresses a webhook must never reach unless private targets are allowed: loopback, private, CGNAT,
 * link-local, multicast, reserved, unspecified; in IPv6 also site-local, and the ranges carrying an
 * IPv4 address a relay may unwrap (NAT64, 6to4, Teredo). The NetworkPolicy's test reads them.
 */
export const BLOCKED_RANGES: ReadonlyArray<readonly [string, number]> = [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  // Azure's wireserver (metadata, certificates, the VM agent), reachable from every Azure VM.
  ['168.63.129.16', 32],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
  ['64:ff9b::', 96],
  ['64:ff9b:1::', 48],
  ['2001::', 32],
  ['2002::', 16],
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  // Site-local: deprecated (RFC 3879), still routed inside some networks.
  ['fec0::', 10],
  ['ff00::', 8],
] as const;
const blocked = new BlockList();
for (const [net, prefix] of BLOCKED_RANGES) {
  blocked.addSubnet(net, prefix, isIP(net) === 6 ? 'ipv6' : 'ipv4');
}

/** IPv6's reserved ::/8, no public address in it; apart: a BlockList rule for it also matches every IPv4 address. */
export const RESERVED_V6 = ['::', 8] as const;
const reservedV6 = new BlockList();
reservedV6.addSubnet(...RESERVED_V6, 'ipv6');

export function isBlockedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return blocked.check(address, 'ipv4');
  if (family === 6) return reservedV6.check(address, 'ipv6') || blocked.check(address, 'ipv6');
  return false;
}

/** Raised from the socket's DNS lookup, so the check holds for the address connected to. */
export class BlockedAddressError extends NamedError {
  readonly code = 'EBLOCKEDADDRESS';
  constructor(readonly host: string, readonly address: string) {
    super(`${host} resolves to ${address}, a loopback, private, link-local or reserved address (ALLOW_PRIVATE_TARGETS=false)`);
  }
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * Names asked of the name servers in resolv.conf by c-ares, off libuv's thread pool: getaddrinfo ran
 * there, two lookups at a time for the whole process, so one merchant's silent DNS (10 s a lookup)
 * queued every other merchant's new connections behind its own. Not /etc/hosts: a webhook's host is
 * a public name (development, with private targets allowed, keeps Node's lookup).
 */
const resolver = new dns.Resolver({ timeout: 2_000, tries: 2 });
/** One question per name at a time: a merchant's many connections to a silent name wait on one. */
const asking = new Map<string, Promise<LookupAddress[]>>();

function addressesOf(hostname: string): Promise<LookupAddress[]> {
  // RFC 6761: never asked of the name servers.
  if (hostname === 'localhost' || hostname.endsWith('.localhost')) return Promise.resolve([{ address: '127.0.0.1', family: 4 }]);
  let answer = asking.get(hostname);
  if (!answer) {
    answer = Promise.allSettled([resolver.resolve4(hostname), resolver.resolve6(hostname)])
      .then(([v4, v6]) => {
        const found = [
          ...(v4.status === 'fulfilled' ? v4.value.map((address) => ({ address, family: 4 })) : []),
          ...(v6.status === 'fulfilled' ? v6.value.map((address) => ({ address, family: 6 })) : []),
        ];
        if (found.length > 0) return found;
        // No address of either family: the telling error (a name without IPv6 only says ENODATA there).
        const errors = [v4, v6].flatMap((r) => (r.status === 'rejected' ? [r.reason as NodeJS.ErrnoException] : []));
        throw errors.find((err) => err.code !== 'ENODATA') ?? errors[0] ?? Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' });
      })
      .finally(() => asking.delete(hostname));
    asking.set(hostname, answer);
  }
  return answer;
}

/** A lookup that refuses blocked addresses at connect time (no DNS rebinding). */
export function guardedLookup(hostname: string, options: object, callback: LookupCallback): void {
  const { family, all } = options as { family?: number | string; all?: boolean };
  const wanted = family === 4 || family === 'IPv4' ? 4 : family === 6 || family === 'IPv6' ? 6 : 0;
  addressesOf(hostname).then(
    (addresses) => {
      const list = wanted === 0 ? addresses : addresses.filter((a) => a.family === wanted);
      if (list.length === 0) return callback(Object.assign(new Error(`${hostname} has no IPv${wanted} address`), { code: 'ENOTFOUND' }), []);
      const bad = list.find((a) => isBlockedAddress(a.address));
      if (bad) return callback(new BlockedAddressError(hostname, bad.address) as unknown as NodeJS.ErrnoException, []);
      if (all) return callback(null, list);
      const first = list[0]!;
      return callback(null, first.address, first.family);
    },
    (err: NodeJS.ErrnoException) => callback(err, []),
  );
}

/** A URL's hostname when it is an IP literal, which never goes through DNS lookup. */
export function literalAddress(hostname: string): string | undefined {
  const host = hostname.replace(/^\[|\]$/g, '');
  return isIP(host) ? host : undefined;
}
