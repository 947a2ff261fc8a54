/**
 * One of a merchant's endpoints as a key: of the in-flight shares (endpoint-guards), of the throttle's
 * state and of its rate-limit cells in PostgreSQL (`throttle:<key>`, so the format is kept). The merchant
 * and the endpoint's id joined by a unit separator, which neither may hold (MERCHANT_ID_PATTERN, ENDPOINT_ID).
 */
export function endpointKey(merchantId: string, endpointId: string): string {
  return `${merchantId}\u001f${endpointId}`;
}

export function endpointOfKey(key: string): { merchantId: string; endpointId: string } {
  const at = key.lastIndexOf('\u001f');
  return { merchantId: key.slice(0, at), endpointId: key.slice(at + 1) };
}

/** Whether `key` is one of the merchant's endpoints. */
export function isKeyOf(key: string, merchantId: string): boolean {
  return key.startsWith(`${merchantId}\u001f`);
}
