import { readFileSync } from 'node:fs';
import type { Decision } from '../../apps/dispatcher/stages/decide.js';
import { describeDelivery } from '../../apps/dispatcher/stages/trace.js';
import { safeUrl, type Span } from '../../libs/tracing/index.js';

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

/**
 * Every value the dispatcher's delivery span can carry as `webhook.outcome` (one per kind of
 * decision, apps/dispatcher/stages/trace.ts) is in docs/tracing.md's list, which an operator
 * searches traces by. KINDS is typed on Decision: a new kind fails to compile until it is here.
 */
describe('webhook.outcome in docs/tracing.md', () => {
  const KINDS: Record<Decision['kind'], true> = {
    delivered: true, superseded: true, erased: true, ordered: true, duplicate: true, skipped: true, returned: true,
    retry: true, defer: true, throttle: true, postpone: true, failed: true, invalid: true,
  };

  it('lists every outcome a delivery span can carry, and fanned-out', () => {
    const outcomes = new Set<string>(['fanned-out']);
    for (const kind of Object.keys(KINDS)) {
      const span = {
        isRecording: () => true,
        setAttribute(key: string, value: unknown) {
          if (key === 'webhook.outcome') outcomes.add(String(value));
          return span;
        },
        setStatus: () => span,
      };
      describeDelivery(span as unknown as Span, undefined, { kind } as Decision);
    }
    const doc = readFileSync('docs/tracing.md', 'utf8').replace(/\s+/g, ' ');
    const list = /`webhook\.outcome` \(([^)]*)\)/.exec(doc)?.[1] ?? '';
    expect([...outcomes].filter((outcome) => !new RegExp(`(^|[\\s,;\`])${outcome}([\\s,;\`]|$)`).test(list))).toEqual([]);
  });
});
