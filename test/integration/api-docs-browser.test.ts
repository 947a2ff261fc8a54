import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';
import type { ApiProgram } from '../../apps/api/program.js';
import { TestBroker, uniquePrefix } from '../support/broker.js';
import { startTestApi } from '../support/api.js';

/** Debian's chromium (apt-get install -y chromium; .ci/run installs it); CHROMIUM_PATH elsewhere. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/**
 * Issue 33: the API reference at /docs, rendered from /openapi.json by assets the API serves
 * itself, in a real browser: the routes and the event catalog are there, and the page asks no
 * other origin for anything (no CDN, no font, no validator badge).
 */
describe('the API reference page (/docs) in a browser', () => {
  const prefix = uniquePrefix('api-docs');
  let api: ApiProgram;
  let browser: Browser;
  let base: string;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`no browser at ${CHROMIUM}: apt-get install -y chromium (or set CHROMIUM_PATH)`);
    api = await startTestApi(prefix, []);
    base = `http://127.0.0.1:${api.port}`;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await api?.stop();
    const test = await TestBroker.open();
    await test.deleteTopology(prefix);
    await test.close();
  });

  it('shows every route and every webhook event, and asks no other origin for anything', async () => {
    const page = await browser.newPage();
    const elsewhere: string[] = [];
    const failed: string[] = [];
    page.on('request', (request) => {
      if (!request.url().startsWith(base) && !request.url().startsWith('data:')) elsewhere.push(request.url());
    });
    page.on('requestfailed', (request) => failed.push(request.url()));
    page.on('console', (message) => {
      if (message.type() === 'error') failed.push(message.text());
    });
    await page.goto(`${base}/docs`);
    await page.getByRole('heading', { name: /Nucleus Webhooks/ }).waitFor({ timeout: 20_000 });
    await page.getByText('/nucleus/tnx/webhook', { exact: true }).first().waitFor();
    await page.getByText('/admin/merchants/{merchantId}', { exact: true }).first().waitFor();
    // The event catalog: OpenAPI 3.1 webhooks, one per event.
    for (const event of ['charge.completed', 'payout', 'refund.completed']) await page.getByText(event, { exact: true }).first().waitFor();
    // An event opens to its payload and signature headers.
    await page.getByText('payout', { exact: true }).first().click();
    await page.getByText('webhook-signature').first().waitFor();
    // As the portal's browser test: a screenshot only when DOCS_SCREENSHOTS names a folder for it.
    if (process.env.DOCS_SCREENSHOTS) await page.screenshot({ path: `${process.env.DOCS_SCREENSHOTS}/api-reference.png`, fullPage: false });
    expect(elsewhere).toEqual([]);
    expect(failed).toEqual([]);
    await page.close();
  }, 60_000);
});
