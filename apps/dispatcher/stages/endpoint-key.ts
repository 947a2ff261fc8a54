/**
 * One of a merchant's endpoints as a key, also of its rate-limit cells in PostgreSQL (so the format
 * is kept): joined by a unit separator, which neither id may hold.
 */
export function endpointKey(merchantId: string, endpointId: string): string {
  return `${merchantId}\u001f${endpointId}`;
}

export function endpointOfKey(key: string): { merchantId: string; endpointId: string } {
  const at = key.lastIndexOf('\u001f');
  return { merchantId: key.slice(0, at), endpointId: key.slice(at + 1) };
}

/**
 * A breaker's key: merchant, endpoint id and URL. Not the server (platforms host many merchants'
 * hooks on one origin), nor the URL alone (a merchant pointing at another's URL would open that
 * one's circuit), nor without the id (the circuit is the endpoint's row).
 */
export function endpointOf(merchantId: string, endpointId: string, url: string): string {
  return `${merchantId}\u001f${endpointId}\u001f${URL.canParse(url) ? new URL(url).href : url}`;
}

/** The start of the keys of one endpoint's URLs, which share its circuit; a key not made by endpointOf is its own. */
export function circuitOf(endpoint: string): string {
  const merchantEnd = endpoint.indexOf('\u001f');
  const endpointEnd = merchantEnd < 0 ? -1 : endpoint.indexOf('\u001f', merchantEnd + 1);
  return endpointEnd < 0 ? endpoint : endpoint.slice(0, endpointEnd + 1);
}

/** An endpoint as a metric label: its URL's origin and its merchant. */
export function endpointLabel(endpoint: string): string {
  const first = endpoint.indexOf('\u001f');
  const url = endpoint.slice(endpoint.lastIndexOf('\u001f') + 1);
  const origin = URL.canParse(url) ? new URL(url).origin : url;
  return `${origin} (${first >= 0 ? endpoint.slice(0, first) : ''})`;
}
