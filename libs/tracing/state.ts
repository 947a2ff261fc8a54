/**
 * Whether the SDK was started in this process. The API package alone is a no-op, but the hot path
 * asks this first so that with tracing off a delivery creates no span object, closure or context.
 */
import { trace, type Tracer } from '@opentelemetry/api';

let active = false;
let current: Tracer | undefined;

export function tracingActive(): boolean {
  return active;
}

export function setTracingActive(on: boolean): void {
  active = on;
  // A tracer belongs to the provider registered when it was taken: a restarted SDK (tests) needs a new one.
  current = undefined;
}

/** The service's tracer, from the provider registered now (the API's no-op one when tracing is off). */
export function tracer(): Tracer {
  return (current ??= trace.getTracer('webhook-relay', '0.1.0'));
}
