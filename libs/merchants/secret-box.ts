import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { NamedError } from '../runtime/named-error.js';

/** `v1:<key id>:<base64 of iv, ciphertext, tag>`; the associated data binds a value to its row. */
export class SecretBox {
  private readonly keys = new Map<string, Buffer>();
  private readonly current: { id: string; key: Buffer };

  /** `previous` only opens. */
  constructor(key: Buffer, previous: readonly Buffer[] = []) {
    for (const k of [key, ...previous]) {
      if (k.length !== 32) throw new Error('a secrets key must be 32 bytes');
      this.keys.set(keyId(k), k);
    }
    this.current = { id: keyId(key), key };
  }

  seal(plain: string, boundTo: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.current.key, iv);
    cipher.setAAD(Buffer.from(boundTo, 'utf8'));
    const body = Buffer.concat([iv, cipher.update(plain, 'utf8'), cipher.final(), cipher.getAuthTag()]);
    return `v1:${this.current.id}:${body.toString('base64')}`;
  }

  /** `where`: the value's row, to report one no key opens. */
  open(sealed: string, boundTo: string, where?: string): string {
    const [version, id, data] = sealed.split(':');
    const key = id === undefined ? undefined : this.keys.get(id);
    if (version !== 'v1' || !key || data === undefined) throw new SecretsKeyError(id, where);
    const body = Buffer.from(data, 'base64');
    const decipher = createDecipheriv('aes-256-gcm', key, body.subarray(0, 12));
    decipher.setAAD(Buffer.from(boundTo, 'utf8'));
    decipher.setAuthTag(body.subarray(body.length - 16));
    try {
      return Buffer.concat([decipher.update(body.subarray(12, body.length - 16)), decipher.final()]).toString('utf8');
    } catch {
      throw new SecretsKeyError(id, where);
    }
  }

  holdsKeyOf(sealed: string): boolean {
    return this.keys.has(keyIdOf(sealed) ?? '');
  }

  isCurrent(sealed: string): boolean {
    return sealed.startsWith(`v1:${this.current.id}:`);
  }
}

/** SECRETS_KEY changed without SECRETS_KEY_PREVIOUS, or the value was altered; `where` names its row. */
export class SecretsKeyError extends NamedError {
  constructor(
    readonly keyId: string | undefined,
    where?: string,
  ) {
    super(`a stored secret does not open with SECRETS_KEY or SECRETS_KEY_PREVIOUS (sealed with key ${keyId ?? 'unknown'})${where ? `: ${where}` : ''}`);
  }
}

export function keyIdOf(sealed: string): string | undefined {
  const [version, id] = sealed.split(':', 2);
  return version === 'v1' ? id : undefined;
}

/** Names the key in a sealed value without revealing it. */
export function keyId(key: Buffer): string {
  return createHash('sha256').update(key).digest('base64url').slice(0, 8);
}
