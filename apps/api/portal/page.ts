import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import type { Request, Response, Router } from 'express';
import { PORTAL_CSS } from './styles.js';

/** The portal's page, modules (ui/*.ts, compiled) and style: from memory, gzipped once, under URLs with their hash. */
function asset(text: string, type: string) {
  const body = Buffer.from(text);
  return { body, gzip: gzipSync(body, { level: 9 }), type, hash: createHash('sha256').update(body).digest('hex').slice(0, 12) };
}
type Asset = ReturnType<typeof asset>;

/** The compiled modules' folder: beside this file in dist, or in dist when this runs from the sources (ts-jest). */
function scriptDir(): URL {
  const candidates = [new URL('./ui/', import.meta.url), new URL('../../../dist/apps/api/portal/ui/', import.meta.url)];
  for (const candidate of candidates) if (existsSync(new URL('portal.js', candidate))) return candidate;
  throw new Error('the portal\'s script is not built: run npm run build');
}

/** `import … from './core.js'`: the relative imports between the portal's modules. */
const IMPORT = /(\bfrom\s*|\bimport\s*)(['"])\.\/([a-z][a-z0-9-]*)\.js\2/g;

/** Each import rewritten to carry the imported module's hash (`./core.js?v=…`): a URL changes with anything it imports. */
function modules(): Map<string, Asset> {
  const dir = scriptDir();
  const sources = new Map(readdirSync(dir).filter((file) => /^[a-z][a-z0-9-]*\.js$/.test(file)).map((file) => [file.slice(0, -3), readFileSync(new URL(file, dir), 'utf8')]));
  const done = new Map<string, Asset>();
  // No circle to guard against: test/unit/dependency-rules.test.ts refuses one.
  const build = (name: string): Asset => {
    const made = done.get(name);
    if (made) return made;
    const source = sources.get(name);
    if (source === undefined) throw new Error(`the portal's module ${name}.js is imported but not built`);
    const text = source.replace(IMPORT, (_m, keyword: string, quote: string, dep: string) => `${keyword}${quote}./${dep}.js?v=${build(dep).hash}${quote}`);
    const item = asset(text, 'text/javascript; charset=utf-8');
    done.set(name, item);
    return item;
  };
  build('portal');
  return done;
}

let assets: { js: Map<string, Asset>; css: Asset } | undefined;
function loaded() {
  return (assets ??= { js: modules(), css: asset(PORTAL_CSS, 'text/css; charset=utf-8') });
}

/** The most the page's modules may weigh together, gzipped each alone, in bytes. */
export const PORTAL_SCRIPT_GZIP_BUDGET = 14_500;

export function portalScriptWeight(): { bytes: number; gzipBytes: number } {
  const js = [...loaded().js.values()];
  return { bytes: js.reduce((n, item) => n + item.body.length, 0), gzipBytes: js.reduce((n, item) => n + item.gzip.length, 0) };
}

function shell(js: Asset, css: Asset): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>Webhooks</title>
<link rel="stylesheet" href="/portal/portal.css?v=${css.hash}">
<script type="module" src="/portal/portal.js?v=${js.hash}"></script>
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
  <a href="#/endpoints">Endpoints</a>
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

export function servePortalAssets(app: Router, frameAncestors: readonly string[]): void {
  // `default-src 'self'`: nothing from anywhere else, no inline script or style.
  const csp = [
    "default-src 'self'",
    "img-src 'self' data:",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    `frame-ancestors 'self'${frameAncestors.map((origin) => ` ${origin}`).join('')}`,
  ].join('; ');
  const send = (req: Request, res: Response, item: Asset, cache: string) => {
    res.set('content-security-policy', csp);
    // frame-ancestors decides embedding; X-Frame-Options (helmet's SAMEORIGIN) would refuse a dashboard on another origin.
    if (frameAncestors.length > 0) res.removeHeader('x-frame-options');
    const gzip = /\bgzip\b/.test(req.get('accept-encoding') ?? '');
    // The ETag makes res.send answer 304 to an If-None-Match that names it.
    res.set({ 'content-type': item.type, 'cache-control': cache, vary: 'accept-encoding', etag: `"${item.hash}"` });
    if (gzip) res.set('content-encoding', 'gzip');
    res.send(gzip ? item.gzip : item.body);
  };
  let page: Asset | undefined;
  // Routing is not strict: this route is /portal and /portal/; the page's links need the slash.
  app.get('/portal/', (req, res) => {
    if (!req.path.endsWith('/')) return res.redirect(301, '/portal/');
    const { js, css } = loaded();
    page ??= asset(shell(js.get('portal')!, css), 'text/html; charset=utf-8');
    send(req, res, page, 'no-store');
  });
  // The modules the page imports (portal.js and the screens'); nothing else is served from here.
  app.get('/portal/:module', (req, res, next) => {
    const name = /^([a-z][a-z0-9-]*)\.js$/.exec(req.params.module ?? '')?.[1];
    const item = name === undefined ? undefined : loaded().js.get(name);
    if (!item) return next();
    send(req, res, item, 'public, max-age=31536000, immutable');
  });
  app.get('/portal/portal.css', (req, res) => send(req, res, loaded().css, 'public, max-age=31536000, immutable'));
}
