import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const GUARD = fileURLToPath(new URL('../../dist/libs/http/address-guard.js', import.meta.url));

/**
 * In its own process and mount namespace, whose resolv.conf names a name server of the test's own
 * (127.0.0.77:53): it answers good.example, and never answers the tarpit's names (a merchant's DNS
 * down, or made silent on purpose). Eight lookups of the tarpit, then one of good.example.
 */
const CHILD = `
import dgram from 'node:dgram';
const server = dgram.createSocket('udp4');
server.on('message', (query, from) => {
  let at = 12;
  const labels = [];
  while (query[at] > 0) { labels.push(query.subarray(at + 1, at + 1 + query[at]).toString()); at += query[at] + 1; }
  const type = query.readUInt16BE(at + 1);
  if (labels.join('.') !== 'good.example') return;
  const question = query.subarray(12, at + 5);
  const head = Buffer.from([query[0], query[1], 0x81, 0x80, 0, 1, 0, type === 1 ? 1 : 0, 0, 0, 0, 0]);
  const answer = type === 1 ? Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 93, 184, 216, 34]) : Buffer.alloc(0);
  server.send(Buffer.concat([head, question, answer]), from.port, from.address);
});
server.bind(53, '127.0.0.77', async () => {
  const { guardedLookup } = await import(${JSON.stringify(GUARD)});
  const lookup = (name) => new Promise((resolve) => guardedLookup(name, { all: true }, (err, addresses) => resolve(err ? { error: err.code } : { addresses })));
  for (let i = 0; i < 8; i++) void lookup('m' + i + '.tarpit.example');
  const started = performance.now();
  const good = await lookup('good.example');
  console.log(JSON.stringify({ good, ms: Math.round(performance.now() - started) }));
  process.exit(0);
});
`;

describe("a merchant's silent DNS", () => {
  it("does not hold another merchant's lookup: each name is asked on its own, off the thread pool", () => {
    const dir = mkdtempSync(join(tmpdir(), 'dns-isolation-'));
    try {
      writeFileSync(join(dir, 'resolv.conf'), 'nameserver 127.0.0.77\n');
      writeFileSync(join(dir, 'child.mjs'), CHILD);
      if (process.getuid?.() !== 0) throw new Error('this test runs as root: it needs its own mount namespace (unshare -m) for a resolv.conf of its own');
      const run = spawnSync('unshare', ['-m', 'sh', '-c', `mount --bind ${dir}/resolv.conf /etc/resolv.conf && exec ${process.execPath} ${dir}/child.mjs`], { encoding: 'utf8', timeout: 20_000 });
      if (run.error) throw run.error;
      const line = run.stdout.trim().split('\n').at(-1) ?? '';
      expect({ status: run.status, stderr: run.stderr.trim() }).toEqual({ status: 0, stderr: '' });
      const result = JSON.parse(line) as { good: { addresses?: Array<{ address: string }> }; ms: number };
      expect(result.good.addresses?.map((a) => a.address)).toEqual(['93.184.216.34']);
      // getaddrinfo held it behind the tarpit's eight (two at a time, 10 s each): 40 s.
      expect(result.ms).toBeLessThan(2_000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
