import { Ajv2020 } from 'ajv/dist/2020.js';
import { openApiDocument } from '../../apps/api/openapi.js';
import { EVENT_NAMES, examplesAccepted, sampleEvent } from '../../libs/contracts/index.js';

type Operation = { parameters: Array<{ name: string; in: string; required: boolean }>; requestBody: { content: { 'application/json': { schema: object; example: unknown } } } };

describe('the event catalog (OpenAPI webhooks)', () => {
  const webhooks = (openApiDocument as unknown as { webhooks: Record<string, { post: Operation }> }).webhooks;
  const ajv = new Ajv2020({ strict: false });

  it('describes every event, with its signature headers, a schema and an example that fits it', () => {
    expect(Object.keys(webhooks).sort()).toEqual([...EVENT_NAMES].sort());
    for (const event of EVENT_NAMES) {
      const { parameters, requestBody } = webhooks[event]!.post;
      expect(parameters.filter((p) => p.in === 'header' && p.required).map((p) => p.name)).toEqual(['webhook-id', 'webhook-timestamp', 'webhook-signature']);
      const { schema, example } = requestBody.content['application/json'];
      const validate = ajv.compile(schema);
      expect(validate(example) ? [] : validate.errors).toEqual([]);
    }
    expect(examplesAccepted()).toBe(true);
  });

  it('fits what the dispatcher sends for each sample, and refuses a body without its reference or of another event', () => {
    for (const event of EVENT_NAMES) {
      const validate = ajv.compile(webhooks[event]!.post.requestBody.content['application/json'].schema);
      const { data } = sampleEvent(event, 'm_1');
      expect(validate({ event, data }) ? [] : validate.errors).toEqual([]);
      const other = EVENT_NAMES.find((e) => e !== event)!;
      expect(validate({ event: other, data })).toBe(false);
      const reference = { 'charge.completed': 'tnxRef', payout: 'reference', 'refund.completed': 'refundRef' }[event];
      const { [reference]: _dropped, ...withoutReference } = data;
      expect(validate({ event, data: withoutReference })).toBe(false);
    }
  });
});
