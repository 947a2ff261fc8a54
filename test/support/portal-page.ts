import { existsSync } from 'node:fs';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import type { ApiOptions, ApiProgram } from '../../apps/api/program.js';
import { type EventName, sampleEvent } from '../../libs/contracts/index.js';
import { EventPublisher } from '../../libs/publisher/index.js';
import { type PortalStack, startPortalStack } from './portal.js';
import { type Behaviour, Receiver } from './receiver.js';

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

/** What a portal browser test drives: the service, a receiver merchants point at, a second one to move to, Chromium. */
export interface PortalBrowserFixture {
  readonly stack: PortalStack;
  readonly api: ApiProgram;
  readonly receiver: Receiver;
  readonly moved: Receiver;
  readonly pages: PortalPages;
  /** Publishes a sample of the event for the merchant, as upstream does. */
  publish(merchantId: string, event?: EventName): Promise<{ webhookId: string; message: ReturnType<typeof sampleEvent> }>;
}

/**
 * Registers (beforeAll / afterAll) a portal browser test file's fixture: Chromium, `receiver`
 * answering as `behaviour` says (204 when not given), `moved` answering 204, and the portal stack
 * named `name` with the API's `options`.
 */
export function portalBrowserFixture(name: string, behaviour: Behaviour = () => 204, options: ApiOptions = {}): PortalBrowserFixture {
  const started: Partial<{ stack: PortalStack; receiver: Receiver; moved: Receiver; pages: PortalPages; publisher: EventPublisher }> = {};
  beforeAll(async () => {
    started.pages = await PortalPages.launch();
    started.receiver = await Receiver.start(behaviour);
    started.moved = await Receiver.start(() => 204);
    started.stack = await startPortalStack(name, 1, options);
    started.publisher = new EventPublisher(started.stack.dispatcher.broker, started.stack.prefix);
  });
  afterAll(async () => {
    await started.pages?.close();
    await started.stack?.close();
    await started.receiver?.close();
    await started.moved?.close();
  });
  return {
    get stack() { return started.stack!; },
    get api() { return started.stack!.apis[0]!; },
    get receiver() { return started.receiver!; },
    get moved() { return started.moved!; },
    get pages() { return started.pages!; },
    async publish(merchantId, event = 'payout') {
      const message = sampleEvent(event, merchantId);
      const { messageId } = await started.publisher!.publish(message);
      return { webhookId: messageId, message };
    },
  };
}
