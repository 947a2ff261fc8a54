import type { ConsumeMessage } from 'amqplib';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { parseIntake } from '../../apps/dispatcher/stages/intake.js';
import { openApiDocument } from '../../apps/api/openapi.js';
import { EVENT_NAMES, sampleEvent, upstreamMessageSchema, webhookExample, webhookPayloadSchema } from '../../libs/contracts/index.js';
import { attemptEvent, disabledEvent, enabledEvent, OPERATIONAL_EVENT_TYPES } from '../../libs/operational/index.js';

type Operation = { parameters: Array<{ name: string; in: string; required: boolean; description: string; example: string }>; requestBody: { content: { 'application/json': { schema: object; example: unknown } } } };

describe('the event catalog (OpenAPI webhooks)', () => {
  const webhooks = (openApiDocument as unknown as { webhooks: Record<string, { post: Operation }> }).webhooks;
  const ajv = new Ajv2020({ strict: false });

  it('describes every event, with its signature headers, a schema and an example that fits it', () => {
    expect(Object.keys(webhooks).sort()).toEqual([...EVENT_NAMES, ...OPERATIONAL_EVENT_TYPES].sort());
    for (const event of [...EVENT_NAMES, ...OPERATIONAL_EVENT_TYPES]) {
      const { parameters, requestBody } = webhooks[event]!.post;
      expect(parameters.filter((p) => p.in === 'header' && p.required).map((p) => p.name)).toEqual(['webhook-id', 'webhook-timestamp', 'webhook-signature']);
      const { schema, example } = requestBody.content['application/json'];
      const validate = ajv.compile(schema);
      expect(validate(example) ? [] : validate.errors).toEqual([]);
    }
    // Every example is a message the service accepts: the catalog cannot show what intake would park.
    for (const event of EVENT_NAMES) {
      expect(upstreamMessageSchema.safeParse({ merchantId: 'm_example', ...webhookExample(event) }).success).toBe(true);
      expect(webhookPayloadSchema(event).safeParse(webhookExample(event)).success).toBe(true);
    }
  });

  it('fits what the dispatcher sends for each sample, and refuses a body without its reference or of another event', () => {
    for (const event of EVENT_NAMES) {
      const validate = ajv.compile(webhooks[event]!.post.requestBody.content['application/json'].schema);
      const { data } = sampleEvent(event, 'm_1');
      expect(validate({ event, data }) ? [] : validate.errors).toEqual([]);
      const other = EVENT_NAMES.find((e) => e !== event)!;
      expect(validate({ event: other, data })).toBe(false);
      const references = { 'charge.completed': ['tnxRef'], payout: ['reference'], 'refund.completed': ['refundRef', 'tnxRef'] }[event];
      const withoutReference = Object.fromEntries(Object.entries(data).filter(([field]) => !references.includes(field)));
      expect(validate({ event, data: withoutReference })).toBe(false);
    }
  });

  it('fits every body intake accepts: a refund known by its tnxRef alone is delivered, and resent by it', () => {
    const validate = ajv.compile(webhooks['refund.completed']!.post.requestBody.content['application/json'].schema);
    const { refundRef: _none, ...data } = sampleEvent('refund.completed', 'm_1').data;
    const content = Buffer.from(JSON.stringify({ merchantId: 'm_1', event: 'refund.completed', data }));
    const message = { content, fields: { exchange: 'p.events', routingKey: 'refund.completed' }, properties: { messageId: 'evt_1', headers: {} } } as unknown as ConsumeMessage;
    const intake = parseIntake(message, 1_000_000, new Date(), 'p.events', 'p.dispatch');
    expect(intake.references).toEqual([data.tnxRef]);
    expect(validate(JSON.parse(intake.body)) ? [] : validate.errors).toEqual([]);
    // Neither reference: intake parks it, and the catalog refuses it.
    const { tnxRef: _neither, ...unreferenced } = data;
    expect(validate({ event: 'refund.completed', data: unreferenced })).toBe(false);
  });

  it('fits every operational event as the dispatcher builds it, folded or not, and refuses one of another type', () => {
    const now = new Date();
    const facts = { merchantId: 'm_1', endpointId: 'ep_m_1_main', url: 'https://m.example/h', webhookId: 'evt_1', event: 'payout', references: ['PO-1'], attempts: 4 };
    const built = [
      attemptEvent('message.attempt.failing', facts, now).event,
      attemptEvent('message.attempt.recovered', { ...facts, lastHttpStatus: 204 }, now).event,
      attemptEvent('message.attempt.exhausted', { ...facts, lastError: 'timeout', reason: 'attempts-exhausted' }, now).event,
      disabledEvent({ merchantId: 'm_1', endpointId: 'ep_m_1_main', url: 'https://m.example/h', reason: 'manual', disabledAt: now.toISOString() }, now).event,
      disabledEvent({ ...facts, reason: 'failing', disabledAt: now.toISOString(), failingSince: now.toISOString(), lastHttpStatus: 503 }, now).event,
      enabledEvent({ merchantId: 'm_1', endpointId: 'ep_m_1_main', url: 'https://m.example/h', enabledAt: now.toISOString() }, now).event,
    ];
    // Folded: the event that stands for others says how many (apps/dispatcher/operations.ts).
    built[0]!.data.suppressed = 998;
    for (const event of built) {
      const validate = ajv.compile(webhooks[event.type]!.post.requestBody.content['application/json'].schema);
      expect(validate(event) ? [] : validate.errors).toEqual([]);
      const other = OPERATIONAL_EVENT_TYPES.find((t) => t !== event.type)!;
      expect(validate({ ...event, type: other })).toBe(false);
      // Each names the endpoint it is about (a merchant has several): without it, it does not fit.
      expect(event.data.endpointId).toBe('ep_m_1_main');
      const { endpointId: _endpoint, ...unnamed } = event.data;
      expect(validate({ ...event, data: unnamed })).toBe(false);
    }
  });

  it("describes the operational webhook's headers as its own: an op_ id, signed with OPERATIONAL_WEBHOOK_SECRET, not a merchant's", () => {
    const header = (event: string, name: string) => webhooks[event]!.post.parameters.find((p) => p.name === name)!;
    const { id } = attemptEvent('message.attempt.failing', { merchantId: 'm_1', endpointId: 'ep_1', url: 'https://m.example/h', webhookId: 'evt_1', event: 'payout', references: ['PO-1'], attempts: 4 }, new Date());
    for (const type of OPERATIONAL_EVENT_TYPES) {
      expect(header(type, 'webhook-id').example).toMatch(/^op_[0-9a-f]{32}$/);
      expect(id).toMatch(/^op_[0-9a-f]{32}$/);
      expect(header(type, 'webhook-id').description).not.toMatch(/upstream|merchant/);
      expect(header(type, 'webhook-signature').description).toContain('OPERATIONAL_WEBHOOK_SECRET');
      expect(header(type, 'webhook-signature').description).not.toMatch(/merchant/);
    }
    // A merchant's webhook keeps the merchant's wording.
    for (const event of EVENT_NAMES) expect(header(event, 'webhook-signature').description).toContain("the merchant's whsec_ secret");
  });
});
