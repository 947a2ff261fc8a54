import { INVALID_CODES } from '../../libs/contracts/index.js';
import { UsageError } from './errors.js';

/** For --help: every code a parked message can carry. */
export const INVALID_CODES_HELP = `Codes: ${INVALID_CODES.join(', ')}
(delivery-limit: parked by the broker itself after too many returns to dispatch).`;

/** A code that no message can carry would only ever match nothing: say so, with the codes there are. */
export function checkInvalidCode(code: string): string {
  if (!(INVALID_CODES as readonly string[]).includes(code)) {
    throw new UsageError(`--code: unknown code "${code}"; the codes are ${INVALID_CODES.join(', ')}`);
  }
  return code;
}
