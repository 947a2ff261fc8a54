import { startTestApi, unresolved } from '../support/api.js';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkScreen, openEndpoint, portalBrowserFixture, SHOTS } from '../support/portal-page.js';
import { verifies } from '../support/receiver.js';
import { waitFor } from '../support/wait.js';


/**
 * The merchant portal in a real browser, end to end against the real API, broker and PostgreSQL:
 * every flow a merchant uses, at 360 px where it matters, by keyboard, and the screenshots of the
 * README (docs/portal-*.png) taken on the way. One browser for the file; a context per session.
 */
describe('the merchant portal in a browser', () => {
  /** Merchant paths whose webhooks the receiver answers 500. */
  const failing = new Set<string>(['/p', '/q', '/cap']);
  // One resend every 2 s, no burst: Recover meets the rate limit and must wait it out (at one every 0.5 s, a loaded machine took longer than that between its two resends, and no 429 came).
  const fixture = portalBrowserFixture('portal-browser', (_n, req) => (failing.has(req.path.replace('/webhooks', '')) ? 500 : 204), { rateLimit: { perMinute: 30, burst: 1 } });
  const { publish } = fixture;

  beforeAll(async () => {
    await fixture.stack.putMerchant('m_p', `${fixture.receiver.url}/p`);
    await fixture.stack.putMerchant('m_q', `${fixture.receiver.url}/q`);
    await fixture.stack.putMerchant('m_cap', `${fixture.receiver.url}/cap`);
  });

  const openPage = (url: string, viewport?: { width: number; height: number }) => fixture.pages.open(url, viewport);

  async function failed(merchantId: string) {
    const { webhookId, message } = await publish(merchantId);
    await fixture.stack.logged(merchantId, webhookId, 'failed');
    const reference = (message.data as { reference: string }).reference;
    await waitFor('failed entry indexed', async () => (await unresolved(fixture.api, merchantId, reference)) > 0 || undefined, 10_000);
    return webhookId;
  }

  it('opens from a link, shows a failed webhook, resends it and watches it turn delivered', async () => {
    // Some history for the chart: delivered ones and a failed one.
    for (let i = 0; i < 3; i++) {
      failing.delete('/p');
      const { webhookId } = await publish('m_p', (['charge.completed', 'payout', 'refund.completed'] as const)[i]!);
      await fixture.stack.logged('m_p', webhookId, 'delivered');
    }
    failing.add('/p');
    const webhookId = await failed('m_p');

    const page = await openPage(await fixture.stack.link('m_p'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    expect(page.url()).not.toContain('token=');
    await page.getByText(`${fixture.receiver.url}/p`).waitFor();
    expect(await page.locator('.tiles li').filter({ hasText: 'failed' }).locator('b').textContent()).toBe('1');
    expect(await page.locator('svg.chart rect').count()).toBeGreaterThan(0);
    await checkScreen(page);
    if (SHOTS) await page.screenshot({ path: `${SHOTS}/portal-overview.png` });

    // By keyboard: the nav's Webhooks link, then the failed one.
    await page.getByRole('link', { name: 'Webhooks' }).focus();
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Webhooks' }).waitFor();
    await page.getByLabel('Status').selectOption('failed');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await page.waitForURL(/status=failed/);
    const row = page.locator('tbody tr').filter({ hasText: 'failed' }).first();
    await row.waitFor();
    await checkScreen(page);
    await row.getByRole('link').click();
    await page.getByRole('heading', { name: `Webhook ${webhookId}` }).waitFor();
    await page.getByText('http_500').first().waitFor();
    await page.getByText('"event": "payout"').waitFor();
    await page.getByRole('cell', { name: 'webhook-id' }).waitFor();
    await checkScreen(page);
    if (SHOTS) await page.screenshot({ path: `${SHOTS}/portal-webhook.png`, fullPage: true });

    failing.delete('/p');
    try {
      await page.getByRole('button', { name: 'Resend this webhook' }).click();
      await page.locator('#main').getByText('Resent: now delivered').waitFor({ timeout: 20_000 });
      expect(fixture.receiver.requests.filter((r) => r.headers['webhook-id'] === webhookId)).toHaveLength(2);
    } finally {
      failing.add('/p');
    }
  });

  it('recovers everything that failed since a time: the count first, then each one with a progress bar', async () => {
    const ids = [await failed('m_p'), await failed('m_p')];
    const page = await openPage(await fixture.stack.link('m_p'), { width: 360, height: 800 });
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await checkScreen(page, 360);
    // Every screen reads at 360 px: tables scroll inside their own box, never the page.
    for (const [hash, heading] of [['#/webhooks', 'Webhooks'], ['#/endpoints', 'Endpoints'], ['#/verify', 'Verify signatures']] as const) {
      await page.goto(`${page.url().split('#')[0]}${hash}`);
      await page.getByRole('heading', { level: 1, name: heading, exact: true }).waitFor();
      await checkScreen(page, 360);
    }
    await page.goto(`${page.url().split('#')[0]}#/recover`);
    await page.getByRole('heading', { name: 'Recover' }).waitFor();
    await page.getByRole('button', { name: 'Find failed webhooks' }).click();
    await page.getByText('2 failed webhook(s) since').waitFor();
    await checkScreen(page, 360);
    const answers: number[] = [];
    page.on('response', (res) => {
      // Each delivery is resent to its own endpoint (the log's items carry it).
      if (/\/portal\/api\/webhooks\/[^/?]+\/resend\?endpointId=ep_[^&]+$/.test(res.url())) answers.push(res.status());
    });
    failing.delete('/p');
    try {
      await page.getByRole('button', { name: 'Resend 2 webhook(s)' }).click();
      await page.getByText('Done: 2 resent').waitFor({ timeout: 20_000 });
      // The second came too soon for RESEND_RATE_LIMIT: the page waited for Retry-After, then sent it.
      expect(answers.filter((status) => status === 429).length).toBeGreaterThan(0);
      expect(answers.filter((status) => status === 200)).toHaveLength(2);
      expect(await page.locator('progress').getAttribute('value')).toBe('2');
      for (const id of ids) await fixture.stack.logged('m_p', id, 'delivered');
    } finally {
      failing.add('/p');
    }
  });

  it('goes on past a webhook resent its 10 times today instead of waiting out that limit\'s day-long Retry-After', async () => {
    const ids = [await failed('m_cap'), await failed('m_cap')];
    // The older one was resent 10 times today (by hand, say): its own limit answers 429 too_many_resends until tomorrow.
    await fixture.stack.db.query("UPDATE failed_webhooks SET resends = 10, resends_since = now() WHERE merchant_id = 'm_cap' AND webhook_id = $1", [ids[0]]);
    failing.delete('/cap');
    try {
      const page = await openPage(await fixture.stack.link('m_cap'));
      await page.getByRole('heading', { name: 'Overview' }).waitFor();
      await page.goto(`${page.url().split('#')[0]}#/recover`);
      await page.getByRole('button', { name: 'Find failed webhooks' }).click();
      await page.getByText('2 failed webhook(s) since').waitFor();
      await page.getByRole('button', { name: 'Resend 2 webhook(s)' }).click();
      await page.getByText('Done: 1 resent, 0 already resent or delivered, 1 to try again later').waitFor({ timeout: 20_000 });
      await fixture.stack.logged('m_cap', ids[1]!, 'delivered');
    } finally {
      failing.add('/cap');
    }
  });

  it('changes the URL and the next webhook arrives there; rotates the secret and the new one verifies the next webhook', async () => {
    const page = await openPage(`${await fixture.stack.link('m_p')}`);
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await openEndpoint(page);
    await checkScreen(page);
    await page.getByLabel('Endpoint URL').fill(`${fixture.moved.url}/p`);
    await page.getByRole('button', { name: 'Save endpoint' }).click();
    await page.getByText('Saved. The next webhook goes to this URL.').waitFor();
    await waitFor('the dispatcher has the new URL', () => fixture.stack.dispatcher.merchants.byId('m_p')?.endpoints[0]?.url === `${fixture.moved.url}/p`, 5_000);
    const first = await publish('m_p');
    const arrived = await waitFor('webhook at the new URL', () => fixture.moved.requests.find((r) => r.headers['webhook-id'] === first.webhookId), 10_000);
    expect(arrived.path).toBe('/webhooks/p');

    await page.getByLabel('Old secret keeps signing for').selectOption('0');
    await page.getByRole('button', { name: 'Rotate secret' }).click();
    const secret = await page.getByLabel('New signing secret').inputValue();
    expect(secret).toMatch(/^whsec_/);
    await page.getByRole('button', { name: 'Copy secret' }).waitFor();
    await waitFor('the dispatcher signs with the new secret', () => fixture.stack.dispatcher.merchants.byId('m_p')?.endpoints[0]?.secret === secret, 5_000);
    const second = await publish('m_p');
    const signed = await waitFor('webhook signed with the new secret', () => fixture.moved.requests.find((r) => r.headers['webhook-id'] === second.webhookId), 10_000);
    expect(verifies(secret, signed)).toBe(true);
  });

  it('turns order per reference on and off: saved for the dispatchers, shown on the overview', async () => {
    await fixture.stack.putMerchant('m_order', `${fixture.receiver.url}/o`);
    const page = await openPage(await fixture.stack.link('m_order'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await page.getByText('none promised').waitFor();
    await openEndpoint(page);
    const ordered = page.getByLabel('Order per reference');
    expect(await ordered.isChecked()).toBe(false);
    await ordered.check();
    await page.getByRole('button', { name: 'Save endpoint' }).click();
    await page.getByText('Saved. The next webhook goes to this URL.').waitFor();
    await waitFor('the dispatcher orders the merchant', () => fixture.stack.dispatcher.merchants.byId('m_order')?.endpoints[0]?.orderByReference === true, 5_000);
    await page.getByRole('link', { name: 'Overview' }).click();
    await page.getByText('per reference: a refund waits for its charge').waitFor();
    await openEndpoint(page);
    expect(await page.getByLabel('Order per reference').isChecked()).toBe(true);
    await page.getByLabel('Order per reference').uncheck();
    await page.getByRole('button', { name: 'Save endpoint' }).click();
    await page.getByText('Saved. The next webhook goes to this URL.').waitFor();
    await waitFor('the dispatcher no longer orders it', () => fixture.stack.dispatcher.merchants.byId('m_order')?.endpoints[0]?.orderByReference === undefined, 5_000);
  });

  it('sets the throttle on the endpoint page; the overview shows it, and the slower rate an endpoint answering 429 is sent at', async () => {
    await fixture.stack.putMerchant('m_t', `${fixture.receiver.url}/t`);
    const page = await openPage(await fixture.stack.link('m_t'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await openEndpoint(page);
    await page.getByLabel('Most webhooks per second').fill('7');
    await page.getByRole('button', { name: 'Save endpoint' }).click();
    await page.getByText('Saved. The next webhook goes to this URL.').waitFor();
    await waitFor('the dispatcher has the throttle', () => fixture.stack.dispatcher.merchants.byId('m_t')?.endpoints[0]?.maxPerSecond === 7, 5_000);
    // What a dispatcher writes when the endpoint answers 429: its rate halved.
    await fixture.stack.db.query("INSERT INTO endpoint_rates (merchant_id, endpoint_id, rate, ceiling) VALUES ('m_t', $1, 3.5, 7)", [fixture.stack.dispatcher.merchants.byId('m_t')!.endpoints[0]!.id]);
    await page.getByRole('link', { name: 'Overview' }).click();
    await page.getByText('at most 7/s; slowed to 3.5/s: your server answered 429 or 503').waitFor();
    await openEndpoint(page);
    await page.getByLabel('Most webhooks per second').fill('');
    await page.getByRole('button', { name: 'Save endpoint' }).click();
    await page.getByText('Saved. The next webhook goes to this URL.').waitFor();
    await waitFor('the throttle removed', () => fixture.stack.dispatcher.merchants.byId('m_t')?.endpoints[0]?.maxPerSecond === undefined, 5_000);
  });

  it('sends a test event with a TEST- reference, delivered and logged like any other', async () => {
    const page = await openPage(await fixture.stack.link('m_p'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await openEndpoint(page);
    await page.getByLabel('Event', { exact: true }).selectOption('refund.completed');
    await page.getByRole('button', { name: 'Send test event' }).click();
    await page.getByText(/Test event sent with reference TEST-/).waitFor();
    const request = await waitFor('the test event', () => fixture.moved.requests.find((r) => r.body.includes('"refundRef":"TEST-')), 10_000);
    expect(JSON.parse(request.body)).toMatchObject({ event: 'refund.completed', data: { refundRef: expect.stringMatching(/^TEST-/), tnxRef: expect.stringMatching(/^TEST-/) } });
    await fixture.stack.logged('m_p', String(request.headers['webhook-id']), 'delivered');
    await page.getByRole('link', { name: 'See what happened to it' }).click();
    await page.getByRole('heading', { name: `Webhook ${String(request.headers['webhook-id'])}` }).waitFor();
    expect(await page.locator('dl.facts .badge').textContent()).toBe('delivered');
    await page.getByRole('link', { name: 'Verify signatures' }).click();
    await page.getByText('app.post("/webhooks/p", express.raw').waitFor();
    await checkScreen(page);
  });

  it('logs out: the page says so, and the session is gone on the server, not only in this tab', async () => {
    const page = await openPage(await fixture.stack.link('m_p'));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    const cookie = (await page.context().cookies()).find((c) => c.name === 'webhooks_portal')!;
    expect(cookie.expires).toBe(-1); // a session cookie
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.getByRole('heading', { name: 'You are logged out' }).waitFor();
    expect(await page.getByRole('navigation', { name: 'Portal' }).isHidden()).toBe(true);
    // Whoever copied the cookie before the logout holds nothing now.
    const copied = await fetch(`http://127.0.0.1:${fixture.stack.apis[0]!.port}/portal/api/session`, { headers: { cookie: `webhooks_portal=${cookie.value}` } });
    expect(copied.status).toBe(401);
    await page.reload();
    await page.getByRole('heading', { name: 'This link cannot be used' }).waitFor();
  });

  it('keeps the Secure cookie of an API outside development mode on http://127.0.0.1 (a secure context), and sends it back', async () => {
    // As deployed, not in development mode: PORTAL_PUBLIC_URL is http://127.0.0.1:<its port>.
    const deployed = await startTestApi(fixture.stack.prefix, [], {}, { ...fixture.stack.env, WEBHOOKS_DEV: undefined });
    try {
      const url = await fixture.stack.link('m_p', undefined, deployed);
      expect(url.startsWith(`http://127.0.0.1:${deployed.port}/portal/#token=`)).toBe(true);
      const page = await openPage(url);
      await page.getByRole('heading', { name: 'Overview' }).waitFor();
      const cookie = (await page.context().cookies()).find((c) => c.name === 'webhooks_portal');
      expect(cookie).toMatchObject({ secure: true, httpOnly: true, sameSite: 'Strict', path: '/portal', expires: -1 });
      // The token is gone from the address bar: only the cookie, sent back over http, opens the session again.
      await page.reload();
      await page.getByRole('heading', { name: 'Overview' }).waitFor();
      await page.getByRole('button', { name: 'Log out' }).click();
      await page.getByRole('heading', { name: 'You are logged out' }).waitFor();
    } finally {
      await deployed.stop();
    }
  });

  it('refuses the link the second time and after its expiry', async () => {
    const url = await fixture.stack.link('m_p');
    const first = await openPage(url);
    await first.getByRole('heading', { name: 'Overview' }).waitFor();
    const again = await openPage(url);
    await again.getByRole('heading', { name: 'This link cannot be used' }).waitFor();
    await again.getByText('already used').waitFor();

    const short = await fixture.stack.link('m_p', { expiresIn: '1s' });
    await waitFor('the link expired', async () => (await fixture.stack.db.query<{ n: string }>('SELECT count(*) AS n FROM portal_links WHERE expires_at > now() - interval \'1 minute\' AND expires_at < now() AND redeemed_at IS NULL'))[0]!.n !== '0', 5_000, 100);
    const late = await openPage(short);
    await late.getByText('expired').waitFor();
  });

  it('never shows another merchant\'s webhook, and refuses writes without the CSRF token or the permission', async () => {
    const theirs = await failed('m_q');
    const page = await openPage(await fixture.stack.link('m_p', { permissions: ['resend', 'manage-endpoint'] }));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    const base = page.url().split('#')[0];
    await page.goto(`${base}#/webhooks/${theirs}`);
    await page.getByText(`No webhook ${theirs}`).waitFor();
    const answers = await page.evaluate(`(async (id) => {
      const session = await (await fetch('/portal/api/session')).json();
      const endpoints = await (await fetch('/portal/api/endpoints')).json();
      const noCsrf = await fetch('/portal/api/webhooks/' + id + '/resend', { method: 'POST' });
      const rotate = await fetch('/portal/api/endpoints/' + endpoints.data.endpoints[0].id + '/secret/rotate', { method: 'POST', headers: { 'x-csrf-token': session.data.csrfToken, 'content-type': 'application/json' }, body: '{}' });
      const theirs = await fetch('/portal/api/webhooks/' + id + '/resend', { method: 'POST', headers: { 'x-csrf-token': session.data.csrfToken } });
      return [noCsrf.status, (await noCsrf.json()).error.code, rotate.status, (await rotate.json()).error.code, theirs.status];
    })(${JSON.stringify(theirs)})`);
    expect(answers).toEqual([403, 'csrf_token_invalid', 403, 'permission_denied', 404]);
    await page.goto(`${base}#/endpoints`);
    await openEndpoint(page);
    await page.getByRole('button', { name: 'Save endpoint' }).waitFor();
    expect(await page.getByRole('button', { name: 'Rotate secret' }).count()).toBe(0);
  });

  it('shows verify snippets that keep a hostile URL path a string: copied and run, they register the path and run nothing', async () => {
    // A colleague (or anyone who can set the URL) puts code in the path: it passes validation.
    await fixture.stack.putMerchant('m_snippet', `${fixture.moved.url}/snippet`);
    const hostile = `${fixture.moved.url}/hooks/'+eval(atob('cHJvY2Vzcy5leGl0KDY2KQ=='))+'`; // process.exit(66)
    const page = await openPage(await fixture.stack.link('m_snippet', { permissions: ['manage-endpoint'] }));
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await openEndpoint(page);
    await page.getByLabel('Endpoint URL').fill(hostile);
    await page.getByRole('button', { name: 'Save endpoint' }).click();
    await page.getByText('Saved. The next webhook goes to this URL.').waitFor();
    await page.getByRole('link', { name: 'Verify signatures' }).click();
    await page.getByRole('heading', { name: 'Verify signatures' }).waitFor();
    const path = new URL(hostile).pathname;
    expect(path).toContain("'+eval(");
    const node = await page.getByLabel('Node.js example').textContent();
    const python = await page.getByLabel('Python example').textContent();
    // What the colleague's machine does with them: express, flask and standardwebhooks replaced by
    // stubs that write down the route registered.
    const dir = mkdtempSync(join(tmpdir(), 'snippet-'));
    const stub = (name: string, files: Record<string, string>) => {
      mkdirSync(join(dir, name), { recursive: true });
      for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, name, file), text);
    };
    stub('node_modules/express', {
      'package.json': '{"type":"module","main":"index.js"}',
      'index.js': "import { writeFileSync } from 'node:fs';\nexport default function express() { return { post(path) { writeFileSync(process.env.ROUTE_FILE, JSON.stringify(path)); }, listen() {} }; }\nexpress.raw = () => () => {};\n",
    });
    stub('node_modules/standardwebhooks', { 'package.json': '{"type":"module","main":"index.js"}', 'index.js': 'export class Webhook {}\n' });
    stub('flask', { '__init__.py': "import json, os\nrequest = None\nclass Flask:\n    def __init__(self, name): pass\n    def post(self, path):\n        open(os.environ['ROUTE_FILE'], 'w').write(json.dumps(path))\n        return lambda f: f\n" });
    stub('standardwebhooks', { '__init__.py': '', 'webhooks.py': 'class Webhook:\n    def __init__(self, secret): pass\n' });
    writeFileSync(join(dir, 'snippet.mjs'), node!);
    writeFileSync(join(dir, 'snippet.py'), python!);
    const run = (command: string, file: string) => {
      const routeFile = join(dir, `${file}.route`);
      const ran = spawnSync(command, [file], { cwd: dir, timeout: 10_000, encoding: 'utf8', env: { ...process.env, ROUTE_FILE: routeFile, PYTHONPATH: dir, WEBHOOK_SECRET: 'whsec_x' } });
      return { status: ran.status, stderr: ran.stderr, route: existsSync(routeFile) ? JSON.parse(readFileSync(routeFile, 'utf8')) : undefined };
    };
    expect(run(process.execPath, 'snippet.mjs')).toEqual({ status: 0, stderr: '', route: path });
    expect(run('python3', 'snippet.py')).toEqual({ status: 0, stderr: '', route: path });
  });
});
