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

  it('shows a portal command whose link allows what the page is said to let the developer do', () => {
    const section = readme.split(/^## /m).find((s) => s.startsWith('The merchant portal'))!;
    const command = /`npm run cli -- (portal [^`]*)`/.exec(section)?.[1];
    expect(command).toBeDefined();
    // The link is view-only unless --permissions names each action (webhooks portal --help).
    const granted = /--permissions ([\w,-]+)/.exec(command!)?.[1]?.split(',') ?? [];
    const said = { resend: /resends what failed/, 'manage-endpoint': /adds and fixes its endpoints/, 'manage-secret': /rotates an endpoint's secret/ };
    for (const [permission, sentence] of Object.entries(said)) expect({ permission, said: sentence.test(section), granted: granted.includes(permission) }).toEqual({ permission, said: true, granted: true });
  });

  it('shows how to find a webhook\'s trace by its webhook-id (issue 32)', () => {
    const section = readme.split(/^## /m).find((s) => s.startsWith("Find a webhook's trace"));
    expect(section).toContain('--profile tracing');
    expect(section).toContain('OTEL_EXPORTER_OTLP_ENDPOINT');
    expect(section).toMatch(/Tags `webhook\.id=evt_\w+`/);
  });
});
