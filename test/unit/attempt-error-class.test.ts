import { networkErrorClass, WebhookBlockedError, WebhookNetworkError, WebhookRejectedError, WebhookTimeoutError } from '../../libs/http/index.js';

describe('the class a merchant sees of a failed attempt', () => {
  it.each([
    ['ECONNREFUSED', 'connection_refused'],
    ['ENOTFOUND', 'dns_failure'],
    ['EAI_AGAIN', 'dns_failure'],
    ['ERR_SSL_WRONG_VERSION_NUMBER', 'tls_error'],
    ['ERR_TLS_CERT_ALTNAME_INVALID', 'tls_error'],
    ['DEPTH_ZERO_SELF_SIGNED_CERT', 'tls_error'],
    ['CERT_HAS_EXPIRED', 'tls_error'],
    ['EPROTO', 'tls_error'],
    ['ETIMEDOUT', 'timeout'],
    ['UND_ERR_CONNECT_TIMEOUT', 'timeout'],
    ['ECONNRESET', 'network_error'],
    ['UND_ERR_SOCKET', 'network_error'],
    ['EHOSTUNREACH', 'network_error'],
    ['SomethingNew', 'network_error'],
  ])('%s is %s', (code, errorClass) => {
    expect(networkErrorClass(code)).toBe(errorClass);
    expect(new WebhookNetworkError(code, 'connect 10.20.3.17:5432').errorClass).toBe(errorClass);
  });

  it('names the status of an answer, and neither the address nor the message of the others', () => {
    expect(new WebhookRejectedError(503).errorClass).toBe('http_503');
    expect(new WebhookTimeoutError(5000).errorClass).toBe('timeout');
    expect(new WebhookBlockedError('vault.corp.internal resolves to 10.20.3.17').errorClass).toBe('blocked_address');
  });
});
