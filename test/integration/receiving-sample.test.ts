import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sampleEvent } from '../../libs/contracts/index.js';
import { type Harness, startHarness, testMerchant, testSecret } from '../support/harness.js';
import { type ReceivedRequest, Receiver } from '../support/receiver.js';

/**
 * docs/receiving.md tells a merchant's developer to verify with its `standardwebhooks` sample. That
 * sample is run here as written (its code block, extracted, with only `rawBody` and `req` given to
 * it, as the merchant's server would) against webhooks a real dispatcher delivered: one signed
 * with one secret, one during a secret rotation's grace (two signatures), each with its own
 * headers and raw body. A sample that no longer verifies what the service sends fails here.
 */
function sample(): string {
  const page = readFileSync('docs/receiving.md', 'utf8');
  const code = /```js\n([\s\S]*?)```/.exec(page)?.[1];
  if (!code) throw new Error('docs/receiving.md has no js block');
  return code;
}

// What the merchant's server has when the sample runs: the request's raw body and its headers.
const PRELUDE = [
  "import { readFileSync } from 'node:fs';",
  "const { body: rawBody, headers } = JSON.parse(readFileSync(process.env.REQUEST_FILE, 'utf8'));",
  'const req = { headers };',
].join('\n');
const EPILOGUE = 'console.log(JSON.stringify(payload));';

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(file: string, env: Record<string, string>): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('the verification sample of docs/receiving.md, run as written on delivered webhooks', () => {
  const current = testSecret();
  const previous = testSecret();
  const merchant = testMerchant('m_receiving', 'http://placeholder');
  let receiver: Receiver;
  let harness: Harness;
  let dir: string;
  let file: string;
  let plain: ReceivedRequest;
  let rotating: ReceivedRequest;
  let payload: unknown;

  beforeAll(async () => {
    receiver = await Receiver.start(() => 204);
    const plainEndpoint = merchant.endpoints[0]!;
    plainEndpoint.url = `${receiver.url}/plain`;
    // Rotated a moment ago: the previous secret signs too until its grace ends.
    const graceEnds = new Date(Date.now() + 86_400_000).toISOString();
    merchant.endpoints.push({ id: 'ep_m_receiving_rotating', url: `${receiver.url}/rotating`, enabled: true, secret: current, previousSecrets: [{ secret: previous, expiresAt: graceEnds }] });
    harness = await startHarness({ name: 'receiving-sample', merchants: [merchant] });
    // Inside node_modules, so that the sample's `import { Webhook } from 'standardwebhooks'` resolves.
    mkdirSync('node_modules/.cache', { recursive: true });
    dir = mkdtempSync(join('node_modules', '.cache', 'receiving-sample-'));
    file = join(dir, 'verify.mjs');
    writeFileSync(file, `${PRELUDE}\n${sample()}\n${EPILOGUE}\n`);
    const message = sampleEvent('payout', merchant.id);
    payload = { event: message.event, data: message.data };
    await harness.publisher.publish(message);
    const requests = await receiver.waitForRequests(2, 15_000);
    plain = requests.find((r) => r.path === '/webhooks/plain')!;
    rotating = requests.find((r) => r.path === '/webhooks/rotating')!;
  }, 30_000);

  afterAll(async () => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    await harness?.close();
    await receiver?.close();
  });

  /** The sample, given this request and this secret: its exit code and the payload it printed. */
  async function verify(request: ReceivedRequest, secret: string): Promise<{ code: number | null; payload?: unknown; stderr: string }> {
    const requestFile = join(dir, `request-${Math.random().toString(36).slice(2)}.json`);
    writeFileSync(requestFile, JSON.stringify({ body: request.body, headers: request.headers }));
    const ran = await run(file, { WEBHOOK_SECRET: secret, REQUEST_FILE: requestFile });
    return ran.code === 0 ? { code: 0, payload: JSON.parse(ran.stdout), stderr: ran.stderr } : { code: ran.code, stderr: ran.stderr };
  }

  it('verifies a webhook signed with the endpoint secret, and returns its payload', async () => {
    expect(plain.headers['webhook-signature']).toMatch(/^v1,\S+$/);
    expect(await verify(plain, merchant.endpoints[0]!.secret)).toEqual({ code: 0, payload, stderr: '' });
  });

  it('during a rotation, verifies with the new secret and with the previous one (two signatures)', async () => {
    expect(String(rotating.headers['webhook-signature']).split(' ')).toHaveLength(2);
    expect(await verify(rotating, current)).toEqual({ code: 0, payload, stderr: '' });
    expect(await verify(rotating, previous)).toEqual({ code: 0, payload, stderr: '' });
  });

  it('throws on another secret or a changed body, as the page says', async () => {
    const refused = await verify(rotating, testSecret());
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('No matching signature found');
    const changed = await verify({ ...plain, body: plain.body.replace('"payout"', '"payout" ') }, merchant.endpoints[0]!.secret);
    expect(changed.code).not.toBe(0);
  });
});
