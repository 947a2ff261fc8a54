import { z } from 'zod';

export const merchantSchema = z.object({
  id: z.string().min(1).max(200),
  publicKey: z.string().min(8, 'publicKey must be at least 8 characters'),
  webhook: z
    .object({
      url: z.url({ protocol: /^https?$/, error: 'webhook.url must be an http(s) URL' }),
      enabled: z.boolean(),
      secret: z.string().regex(/^whsec_[A-Za-z0-9+/]{16,}={0,2}$/, 'webhook.secret must be whsec_ followed by base64'),
    })
    .optional(),
});

export const merchantsFileSchema = z
  .object({ merchants: z.array(merchantSchema) })
  .superRefine((file, ctx) => {
    const ids = new Set<string>();
    const keys = new Set<string>();
    file.merchants.forEach((m, i) => {
      if (ids.has(m.id)) ctx.addIssue({ code: 'custom', path: ['merchants', i, 'id'], message: `duplicate merchant id ${m.id}` });
      if (keys.has(m.publicKey)) ctx.addIssue({ code: 'custom', path: ['merchants', i, 'publicKey'], message: 'duplicate publicKey' });
      ids.add(m.id);
      keys.add(m.publicKey);
    });
  });

export type Merchant = z.infer<typeof merchantSchema>;
export type MerchantsFile = z.infer<typeof merchantsFileSchema>;
