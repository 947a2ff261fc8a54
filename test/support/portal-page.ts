import { existsSync } from 'node:fs';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

/** Debian's chromium (apt-get install -y chromium; .ci/run installs it); CHROMIUM_PATH elsewhere. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
/** Where to write the docs' screenshots of the portal (`DOCS_SCREENSHOTS=docs`; api-docs-browser writes its own there too): a plain run leaves the tracked images alone. */
export const SHOTS = process.env.DOCS_SCREENSHOTS;

/**
 * One Chromium for a test file, and a context per page opened (a session each): what the portal's
 * browser tests drive. `open` fails the test on any error the page throws.
 */
export class PortalPages {
  private readonly contexts: BrowserContext[] = [];

  private constructor(private readonly browser: Browser) {}

  static async launch(): Promise<PortalPages> {
    if (!existsSync(CHROMIUM)) throw new Error(`no browser at ${CHROMIUM}: apt-get install -y chromium (or set CHROMIUM_PATH)`);
    return new PortalPages(await chromium.launch({ executablePath: CHROMIUM, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] }));
  }

  async open(url: string, viewport = { width: 1100, height: 900 }): Promise<Page> {
    const context = await this.browser.newContext({ viewport });
    this.contexts.push(context);
    const page = await context.newPage();
    page.on('pageerror', (err) => {
      throw err;
    });
    await page.goto(url);
    return page;
  }

  async close(): Promise<void> {
    for (const context of this.contexts) await context.close().catch(() => {});
    await this.browser.close();
  }
}

/** Every control on the page has an accessible name, and nothing makes the page scroll sideways. */
export async function checkScreen(page: Page, width?: number): Promise<void> {
  // Runs in the page (a string: the tests are compiled without the DOM's types).
  const unnamed = await page.evaluate(`[...document.querySelectorAll('button, a, input, select, textarea')]
    .filter((e) => !((e.labels && e.labels.length > 0) || e.getAttribute('aria-label') || (e.textContent || '').trim() || e.getAttribute('title'))
      && e.type !== 'hidden' && !e.closest('[hidden]'))
    .map((e) => e.outerHTML.slice(0, 120))`);
  expect(unnamed).toEqual([]);
  if (width) expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(width);
}

/** The nav's Endpoints screen (its own heading, not the overview's list). */
export async function openEndpoints(page: Page): Promise<void> {
  await page.getByRole('navigation', { name: 'Portal' }).getByRole('link', { name: 'Endpoints' }).click();
  await page.getByRole('heading', { level: 1, name: 'Endpoints', exact: true }).waitFor();
}

/** The nav's Endpoints, then the settings page of the endpoint in row `row` of the list. */
export async function openEndpoint(page: Page, row = 0): Promise<void> {
  await openEndpoints(page);
  await page.locator('tbody tr').nth(row).getByRole('link').click();
  await page.getByRole('heading', { level: 1, name: /^Endpoint / }).waitFor();
}
