import { merchantsFileSchema } from '../../libs/merchants/index.js';

/** The shape of a file of merchants: development mode's (config/merchants.dev.json), which seeds its embedded database. */
describe('the merchants file schema', () => {
  const firstIssue = (content: unknown) => {
    const parsed = merchantsFileSchema.safeParse(content);
    if (parsed.success) return undefined;
    const issue = parsed.error.issues[0]!;
    return `${issue.path.join('.')}: ${issue.message}`;
  };

  it.each([
    [{ merchants: [{ id: 'm', publicKey: 'pk_test_12345678', endpoints: [{ id: 'ep_x_main', url: 'ftp://x.example', enabled: true, secret: 'whsec_MDEyMzQ1Njc4OWFiY2RlZg==' }] }] }, 'merchants.0.endpoints.0.url: webhook.url must be an http(s) URL'],
    [{ merchants: [{ id: 'm', publicKey: 'short' }] }, 'merchants.0.publicKey: publicKey must be at least 8 characters'],
    [{ merchants: [{ id: 'a', publicKey: 'pk_test_same_key' }, { id: 'b', publicKey: 'pk_test_same_key' }] }, 'merchants.1.publicKey: duplicate publicKey'],
    [{ merchants: {} }, 'merchants: '],
    [{ merchants: [{ id: 'm', publicKey: 'pk_test_12345678', endpoints: [{ url: 'https://x.example', enabled: true, secret: 'whsec_MDEyMzQ1Njc4OWFiY2RlZg==' }] }] }, 'merchants.0.endpoints.0.id: '],
    [{ merchants: [{ id: 'm', publicKey: 'pk_test_12345678', endpoints: [{ id: 'wh_1', url: 'https://x.example', enabled: true, secret: 'whsec_MDEyMzQ1Njc4OWFiY2RlZg==' }] }] }, 'merchants.0.endpoints.0.id: endpoint id must be ep_'],
  ])('refuses %j, naming the field', (content, message) => {
    expect(firstIssue(content)).toContain(message);
  });
});
