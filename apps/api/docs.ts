import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import express from 'express';

/** Swagger UI from this process, no CDN: it works offline and under a CSP of 'self' (no inline script). */
const ASSETS = ['swagger-ui-bundle.js', 'swagger-ui.css', 'favicon-32x32.png'];

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Nucleus Webhooks: API reference</title>
  <link rel="icon" href="/docs/assets/favicon-32x32.png">
  <link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
  <main id="reference" aria-label="API reference"></main>
  <script src="/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/docs/assets/init.js"></script>
</body>
</html>
`;

const INIT = `window.ui = SwaggerUIBundle({
  url: '/openapi.json',
  dom_id: '#reference',
  deepLinking: true,
  validatorUrl: null,
  defaultModelsExpandDepth: 0,
});
`;

export function docsRouter(): express.Router {
  const dir = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
  const router = express.Router();
  router.get('/docs', (_req, res) => res.type('html').set('cache-control', 'no-cache').send(PAGE));
  router.get('/docs/assets/init.js', (_req, res) => {
    res.type('application/javascript').set('cache-control', 'no-cache').send(INIT);
  });
  for (const asset of ASSETS) {
    router.get(`/docs/assets/${asset}`, (_req, res) => res.sendFile(join(dir, asset), { maxAge: '1d' }));
  }
  return router;
}
