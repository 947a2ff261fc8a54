import { safeUrl } from '../../libs/tracing/index.js';

/**
 * What an attempt's span exports as `url.full` (apps/dispatcher/stages/trace.ts): the merchant's
 * URL without its query, fragment or credentials, where a token or a password can sit; the path
 * stays (docs/tracing.md says so: a token in a path reaches the collector).
 */
describe('url.full of an attempt', () => {
  it('drops the userinfo, the query and the fragment, and keeps the scheme, host, port and path', () => {
    expect(safeUrl('https://user:s3cret@shop.example:8443/hooks/T0k3n?sig=abc&token=xyz#frag')).toEqual({
      full: 'https://shop.example:8443/hooks/T0k3n',
      address: 'shop.example',
      port: 8443,
      scheme: 'https',
    });
  });

  it('drops a user without a password and an empty query, and names the default port', () => {
    expect(safeUrl('http://only-user@127.0.0.1/webhooks?')).toEqual({ full: 'http://127.0.0.1/webhooks', address: '127.0.0.1', port: 80, scheme: 'http' });
    expect(safeUrl('https://[::1]/a/b?x=1')).toMatchObject({ full: 'https://[::1]/a/b', port: 443 });
  });

  it('exports nothing of a URL it cannot parse', () => {
    expect(safeUrl('not a url?token=abc')).toBeUndefined();
  });
});
