import { isIP } from 'node:net';

/** The host of a URL when it is an IP literal: those never go through DNS lookup, so are checked apart. */
export function literalAddress(url: string): string | undefined {
  try {
    const host = new URL(url).hostname.replace(/^\[|\]$/g, '');
    return isIP(host) ? host : undefined;
  } catch {
    return undefined;
  }
}
