import { z } from 'zod';

/** A merchant id as the API, the CLI and the delivery log take it: the one definition. */
export const MERCHANT_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$/;

export const merchantIdSchema = z
  .string()
  .regex(MERCHANT_ID_PATTERN, 'The merchant id must be 1 to 200 letters, digits, ".", "_", ":" or "-", starting with a letter or digit');

/**
 * The platform's own endpoint, OPERATIONAL_WEBHOOK_URL: the merchant id under which the dispatcher
 * delivers the operational events, and the delivery log and `failed` record them. It is no row:
 * each dispatcher builds it from its own configuration, and no merchant can be created with it.
 */
export const PLATFORM_MERCHANT_ID = 'platform:operational';
