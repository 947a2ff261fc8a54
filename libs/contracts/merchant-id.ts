import { z } from 'zod';

export const MERCHANT_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$/;

export const merchantIdSchema = z
  .string()
  .regex(MERCHANT_ID_PATTERN, 'The merchant id must be 1 to 200 letters, digits, ".", "_", ":" or "-", starting with a letter or digit');

/** The merchant id the operational events are delivered, logged and failed under: no row, and no merchant can take it. */
export const PLATFORM_MERCHANT_ID = 'platform:operational';
