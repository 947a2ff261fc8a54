import { MAX_GRACE_SECRETS } from './schema.js';
import { NamedError } from '../runtime/named-error.js';

/** A field of the input is wrong; the message reads as a sentence: "url must be an https URL". */
export class InvalidSettingsError extends NamedError {
  constructor(readonly field: string, detail: string) {
    super(/^(must|is|are) /.test(detail) ? `${field} ${detail}` : field === 'body' ? detail : `${field}: ${detail}`);
  }
}

export class MerchantNotFoundError extends NamedError {
  constructor(readonly merchantId: string) {
    super(`no merchant ${merchantId}`);
  }
}

export class PublicKeyTakenError extends NamedError {
  constructor() {
    super('another merchant has this public key');
  }
}

export class TooManySecretsError extends NamedError {
  constructor(readonly merchantId: string, readonly endpointId: string, readonly earliestExpiry: string) {
    super(
      `endpoint ${endpointId} of merchant ${merchantId} already has ${MAX_GRACE_SECRETS} previous secrets signing; the first stops at ${earliestExpiry}. ` +
        'Rotate after that, or with graceSeconds 0 to replace the current secret at once',
    );
  }
}

export class DisabledByOperatorError extends NamedError {
  constructor(readonly merchantId: string) {
    super(`the webhook of merchant ${merchantId} was disabled by the platform; only the platform can enable it`);
  }
}

export class InvalidIdempotencyKeyError extends NamedError {
  constructor() {
    super('Idempotency-Key must be 1 to 255 printable ASCII characters without spaces (a UUID, say)');
  }
}

export class EndpointLimitError extends NamedError {
  constructor(readonly merchantId: string, readonly limit: number) {
    super(`merchant ${merchantId} already has ${limit} endpoint${limit === 1 ? '' : 's'}, the most a merchant may have (MAX_ENDPOINTS_PER_MERCHANT: ${limit})`);
  }
}

export class EndpointUrlTakenError extends NamedError {
  constructor(readonly merchantId: string, readonly endpointId: string) {
    super(`merchant ${merchantId} already sends to this URL (endpoint ${endpointId})`);
  }
}

export class EndpointNotFoundError extends NamedError {
  constructor(readonly merchantId: string, readonly endpointId: string) {
    super(`merchant ${merchantId} has no endpoint ${endpointId}`);
  }
}
