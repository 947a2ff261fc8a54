import { readFileSync } from 'node:fs';

describe('README.md', () => {
  const readme = readFileSync('README.md', 'utf8');

  it('is a front page: at most 300 lines, the guides in docs/ for the rest', () => {
    expect(readme.split('\n').length).toBeLessThanOrEqual(300);
  });

  it('gives the two commands, the walkthrough, and one line per guide', () => {
    expect(readme).toContain('npm start');
    expect(readme).toContain('npm test');
    expect(readme).toContain('From a failing merchant to a successful resend');
    const guides = [...readme.matchAll(/^- \[[^\]]+\]\((docs\/[a-z-]+\.md)\)/gm)].map((m) => m[1]);
    for (const guide of ['publishing', 'receiving', 'resending', 'delivery-log', 'merchants', 'operating', 'cluster', 'configuration', 'cli', 'architecture', 'guarantees', 'limits', 'production', 'troubleshooting']) {
      expect(guides).toContain(`docs/${guide}.md`);
    }
  });

  it('shows how to find a webhook\'s trace by its webhook-id (issue 32)', () => {
    const section = readme.split(/^## /m).find((s) => s.startsWith("Find a webhook's trace"));
    expect(section).toContain('--profile tracing');
    expect(section).toContain('OTEL_EXPORTER_OTLP_ENDPOINT');
    expect(section).toMatch(/Tags `webhook\.id=evt_\w+`/);
  });
});
