import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import type { Request, Response, Router } from 'express';
import { PORTAL_CSS } from './styles.js';

/**
 * The portal's page, script and style: one HTML shell rendered here, one hand-written ES module
 * (ui/portal.ts, compiled by the same `tsc -b` as the rest into dist) and one style sheet, served
 * from memory with their gzip made once at start-up, under URLs carrying their hash (cached a year).
 */
interface Asset {
  body: Buffer;
  gzip: Buffer;
  type: string;
  hash: string;
}

function asset(body: Buffer | string, type: string): Asset {
  const buffer = Buffer.isBuffer(body) ? body : Buffer.from(body);
  return { body: buffer, gzip: gzipSync(buffer, { level: 9 }), type, hash: createHash('sha256').update(buffer).digest('hex').slice(0, 12) };
}

/**
 * The compiled module: beside this file in dist; from the sources (tests run them with ts-jest),
 * in dist, which `npm run build` makes before any test.
 */
function script(): Buffer {
  const candidates = [new URL('./ui/portal.js', import.meta.url), new URL('../../../dist/apps/api/portal/ui/portal.js', import.meta.url)];
  for (const candidate of candidates) if (existsSync(candidate)) return readFileSync(candidate);
  throw new Error('the portal\'s script is not built: run npm run build');
}

let assets: { js: Asset; css: Asset } | undefined;
function loaded() {
  return (assets ??= { js: asset(script(), 'text/javascript; charset=utf-8'), css: asset(PORTAL_CSS, 'text/css; charset=utf-8') });
}

/** The shipped script's weight, for the README and the test that keeps it small. */
export function portalScriptWeight(): { bytes: number; gzipBytes: number } {
  const { js } = loaded();
  return { bytes: js.body.length, gzipBytes: js.gzip.length };
}

function send(req: Request, res: Response, item: Asset, cache: string): void {
  const gzip = /\bgzip\b/.test(req.get('accept-encoding') ?? '');
  res.set({ 'content-type': item.type, 'cache-control': cache, vary: 'accept-encoding', etag: `"${item.hash}"` });
  if (req.get('if-none-match') === `"${item.hash}"`) {
    res.status(304).end();
    return;
  }
  if (gzip) res.set('content-encoding', 'gzip');
  res.send(gzip ? item.gzip : item.body);
}

const escape = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function shell(js: Asset, css: Asset): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>Webhooks</title>
<link rel="stylesheet" href="/portal/portal.css?v=${escape(css.hash)}">
<script type="module" src="/portal/portal.js?v=${escape(js.hash)}"></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
  <span class="brand">Webhooks</span>
  <span id="who" class="who"></span>
  <button id="logout" type="button" hidden>Log out</button>
</header>
<nav id="nav" aria-label="Portal" hidden>
  <a href="#/overview">Overview</a>
  <a href="#/webhooks">Webhooks</a>
  <a href="#/recover">Recover</a>
  <a href="#/endpoint">Endpoint</a>
  <a href="#/verify">Verify signatures</a>
</nav>
<main id="main" tabindex="-1">
  <p id="loading">Loading…</p>
  <noscript><p>This page needs JavaScript.</p></noscript>
</main>
<div id="status" class="visually-hidden" role="status" aria-live="polite"></div>
</body>
</html>
`;
}

/** `default-src 'self'`: nothing from anywhere else, no inline script or style. */
export function portalCsp(frameAncestors: readonly string[]): string {
  return [
    "default-src 'self'",
    "img-src 'self' data:",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    `frame-ancestors 'self'${frameAncestors.map((origin) => ` ${origin}`).join('')}`,
  ].join('; ');
}

export function servePortalAssets(app: Router, frameAncestors: readonly string[]): void {
  const csp = portalCsp(frameAncestors);
  const headers = (res: Response) => {
    res.set('content-security-policy', csp);
    // frame-ancestors decides embedding; X-Frame-Options (helmet's SAMEORIGIN) would refuse a dashboard on another origin.
    if (frameAncestors.length > 0) res.removeHeader('x-frame-options');
  };
  let page: Asset | undefined;
  // Routing is not strict: this route is /portal and /portal/; the page's links need the slash.
  app.get('/portal/', (req, res) => {
    if (!req.path.endsWith('/')) return res.redirect(301, '/portal/');
    const { js, css } = loaded();
    page ??= asset(shell(js, css), 'text/html; charset=utf-8');
    headers(res);
    send(req, res, page, 'no-store');
  });
  app.get('/portal/portal.js', (req, res) => {
    headers(res);
    send(req, res, loaded().js, 'public, max-age=31536000, immutable');
  });
  app.get('/portal/portal.css', (req, res) => {
    headers(res);
    send(req, res, loaded().css, 'public, max-age=31536000, immutable');
  });
}
