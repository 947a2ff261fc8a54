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
