import { readFileSync } from 'node:fs';
import { openApiDocument } from '../../apps/api/openapi.js';
import { EVENT_NAMES, type EventName, sampleEvent } from '../../libs/contracts/index.js';

/**
 * The payload shapes of the specification (docs/webhook-service-spec.md, section 2 and the events
 * table of section 6), read from the spec itself, against the samples every delivery test sends and
 * the OpenAPI event catalog merchants read: a field renamed, dropped or retyped on either side fails here.
 */
const spec = readFileSync(new URL('../../docs/webhook-service-spec.md', import.meta.url), 'utf8');

/** The `| Field | Type | …` table under the heading that starts with `heading`: field name → type. */
function table(heading: string): Map<string, string> {
  const start = spec.indexOf(`\n### ${heading}`);
  expect(start).toBeGreaterThan(0);
  const rows = spec.slice(start + 1).split(/\n#{2,3} /)[0]!.split('\n').filter((line) => line.startsWith('| ') && !line.startsWith('| Field') && !line.startsWith('|---'));
  return new Map(rows.map((row) => row.split('|').map((cell) => cell.trim())).map(([, field, type]) => [field!, type!]));
}

const RECORDS: Record<EventName, string> = { 'charge.completed': '2.2', payout: '2.3', 'refund.completed': '2.4' };
const WALL_CLOCK_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}$/;
const SPACED_SECONDS = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;

/** Whether a JSON value is of the spec's type; "number in the samples" (the phone) is not settled by the spec: either. */
function ofType(value: unknown, type: string): boolean {
  if (type === 'integer') return Number.isInteger(value);
  if (type === 'object') return typeof value === 'object' && value !== null && !Array.isArray(value);
  if (type.startsWith('number in the samples')) return typeof value === 'number' || (typeof value === 'string' && /^\d+$/.test(value));
  return typeof value === type;
}

describe('the payloads the specification shows (section 2)', () => {
  const catalog = (openApiDocument as unknown as { webhooks: Record<string, { post: { requestBody: { content: { 'application/json': { schema: CatalogSchema } } } } }> }).webhooks;

  it('names the three events of section 6, and the envelope of 2.1 is event and data', () => {
    const events = [...spec.matchAll(/^\| (\S+) \| [^|]+ \| 2\.\d \|/gm)].map((m) => m[1]);
    expect(events.sort()).toEqual([...EVENT_NAMES].sort());
    expect([...table('2.1').keys()]).toEqual(['event', 'data']);
    for (const event of EVENT_NAMES) expect(Object.keys(sampleEvent(event, 'm_1'))).toEqual(['merchantId', 'event', 'data']);
  });

  it.each(EVENT_NAMES)('samples %s with exactly the fields and types of its record, customer included', (event) => {
    const fields = table(RECORDS[event]);
    const { data } = sampleEvent(event, 'm_1');
    expect(Object.keys(data).sort()).toEqual([...fields.keys()].sort());
    for (const [field, type] of fields) expect({ field, type, fits: ofType(data[field], type) }).toEqual({ field, type, fits: true });
    expect(data.createdAt).toMatch(WALL_CLOCK_MS);
    expect(['successful', 'failed']).toContain(data.status);
    if (!fields.has('customer')) return;
    const customer = data.customer as Record<string, unknown>;
    const customerFields = table('2.5');
    expect(Object.keys(customer).sort()).toEqual([...customerFields.keys()].sort());
    for (const [field, type] of customerFields) expect({ field, type, fits: ofType(customer[field], type) }).toEqual({ field, type, fits: true });
    expect([customer.createdAt, customer.updatedAt]).toEqual([expect.stringMatching(SPACED_SECONDS), expect.stringMatching(SPACED_SECONDS)]);
  });

  it.each(EVENT_NAMES)("describes in the event catalog every field of %s's record, and of the customer", (event) => {
    const described = catalogFields(catalog[event]!.post.requestBody.content['application/json'].schema.properties.data!);
    expect([...described.keys()].sort()).toEqual([...table(RECORDS[event]).keys()].sort());
    const customer = described.get('customer');
    if (customer) expect([...catalogFields(customer).keys()].sort()).toEqual([...table('2.5').keys()].sort());
  });
});

interface CatalogSchema {
  properties: Record<string, CatalogSchema>;
  anyOf?: CatalogSchema[];
}

/** A schema's properties; a union (the refund: either reference) by the union of its members'. */
function catalogFields(schema: CatalogSchema): Map<string, CatalogSchema> {
  const members = schema.anyOf ?? [schema];
  return new Map(members.flatMap((member) => Object.entries(member.properties ?? {})));
}
