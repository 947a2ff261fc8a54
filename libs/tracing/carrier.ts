import { type Context, context, propagation, type TextMapGetter, type TextMapSetter } from '@opentelemetry/api';

/**
 * W3C trace context in AMQP and HTTP headers; amqplib hands a header back as a string or, from
 * pika or rabbitmq-c, a Buffer: both are read.
 */
const headerGetter: TextMapGetter<Record<string, unknown> | undefined> = {
  keys: (carrier) => (carrier ? Object.keys(carrier) : []),
  get: (carrier, key) => {
    const value = carrier?.[key];
    if (typeof value === 'string') return value;
    if (Buffer.isBuffer(value)) return value.toString('utf8');
    return undefined;
  },
};

const headerSetter: TextMapSetter<Record<string, unknown>> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

/** The context a message's headers carry, on top of `base` (the active one by default). */
export function contextFromHeaders(headers: Record<string, unknown> | undefined, base: Context = context.active()): Context {
  return propagation.extract(base, headers, headerGetter);
}

/** Writes `ctx`'s span (the active one by default) into headers as traceparent/tracestate, replacing any there. */
export function injectInto(headers: Record<string, unknown>, ctx: Context = context.active()): void {
  propagation.inject(ctx, headers, headerSetter);
}
