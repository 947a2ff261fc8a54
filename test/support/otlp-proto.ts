/**
 * Reads an OTLP/protobuf ExportTraceServiceRequest into the shape of its OTLP/JSON form, so the
 * test receiver checks what the SDK's protobuf exporter sent as it checks its JSON exporter's.
 * Only the fields the tests look at (opentelemetry-proto trace/v1 and common/v1).
 */
type Field = number | bigint | Buffer;

/** A message's fields by number, each in the order met (varints as numbers, 64-bit as bigints, the rest as bytes). */
function fieldsOf(buf: Buffer): Map<number, Field[]> {
  const fields = new Map<number, Field[]>();
  let i = 0;
  const varint = (): bigint => {
    let value = 0n;
    let shift = 0n;
    for (;;) {
      const byte = buf[i++]!;
      value |= BigInt(byte & 0x7f) << shift;
      shift += 7n;
      if (byte < 0x80) return value;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const type = key & 7;
    let value: Field;
    if (type === 0) value = Number(BigInt.asIntN(64, varint()));
    else if (type === 1) (value = buf.readBigUInt64LE(i)), (i += 8);
    else if (type === 5) (value = buf.readUInt32LE(i)), (i += 4);
    else if (type === 2) {
      const length = Number(varint());
      value = buf.subarray(i, i + length);
      i += length;
    } else throw new Error(`protobuf wire type ${type}`);
    const list = fields.get(key >>> 3) ?? [];
    list.push(value);
    fields.set(key >>> 3, list);
  }
  return fields;
}

const messages = (fields: Map<number, Field[]>, n: number) => (fields.get(n) ?? []).map((b) => fieldsOf(b as Buffer));
const bytes = (fields: Map<number, Field[]>, n: number) => fields.get(n)?.[0] as Buffer | undefined;
const text = (fields: Map<number, Field[]>, n: number) => bytes(fields, n)?.toString('utf8');
const hex = (fields: Map<number, Field[]>, n: number) => bytes(fields, n)?.toString('hex') ?? '';

function anyValue(fields: Map<number, Field[]>): Record<string, unknown> {
  if (fields.has(1)) return { stringValue: text(fields, 1) };
  if (fields.has(2)) return { boolValue: fields.get(2)![0] === 1 };
  if (fields.has(3)) return { intValue: fields.get(3)![0] };
  if (fields.has(4)) return { doubleValue: Buffer.from(new BigUint64Array([fields.get(4)![0] as bigint]).buffer).readDoubleLE(0) };
  return {};
}

const keyValues = (fields: Map<number, Field[]>, n: number) => messages(fields, n).map((kv) => ({ key: text(kv, 1), value: anyValue(messages(kv, 2)[0] ?? new Map()) }));

function span(fields: Map<number, Field[]>): Record<string, unknown> {
  const status = messages(fields, 15)[0];
  return {
    traceId: hex(fields, 1),
    spanId: hex(fields, 2),
    traceState: text(fields, 3),
    parentSpanId: hex(fields, 4),
    name: text(fields, 5),
    kind: fields.get(6)?.[0] ?? 0,
    startTimeUnixNano: String(fields.get(7)?.[0] ?? 0),
    endTimeUnixNano: String(fields.get(8)?.[0] ?? 0),
    attributes: keyValues(fields, 9),
    links: messages(fields, 13).map((link) => ({ traceId: hex(link, 1), spanId: hex(link, 2), attributes: keyValues(link, 4) })),
    status: status ? { code: status.get(3)?.[0], message: text(status, 2) } : undefined,
  };
}

/** ExportTraceServiceRequest → resourceSpans[] { resource.attributes, scopeSpans[] { spans[] } }. */
export function decodeTraceRequest(body: Buffer): { resourceSpans: unknown[] } {
  return {
    resourceSpans: messages(fieldsOf(body), 1).map((resourceSpans) => ({
      resource: { attributes: keyValues(messages(resourceSpans, 1)[0] ?? new Map(), 1) },
      scopeSpans: messages(resourceSpans, 2).map((scope) => ({ spans: messages(scope, 2).map(span) })),
    })),
  };
}
