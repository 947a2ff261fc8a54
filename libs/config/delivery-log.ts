import { z } from 'zod';
import { envFields } from './env.js';

/** The delivery log's variables, spread into the schema of each program that uses them. */
export const deliveryLogFields = {
  /** PostgreSQL: the failure index, the claims of resends and the delivery log; required outside development mode. */
  DATABASE_URL: z
    .string()
    .refine((v) => /^postgres(ql)?:\/\/\S+$/.test(v) && URL.canParse(v), 'must be a postgres:// or postgresql:// URL')
    .optional(),
  DELIVERY_LOG: z.enum(['on', 'off'], { error: 'must be on or off' }).default('on'),
  DELIVERY_LOG_RETENTION: envFields.durationMs('30d'),
  DELIVERY_LOG_RESPONSE_BYTES: z
    .string()
    .default('1024')
    .refine((v) => /^\d+$/.test(v.trim()) && Number(v) <= 65_536, 'must be a whole number of bytes from 0 to 65536')
    .transform(Number),
};
