/**
 * Whether the SDK was started in this process. The API package alone is a no-op, but the hot path
 * asks this first so that with tracing off a delivery creates no span object, closure or context.
 */
import { trace, type Tracer } from '@opentelemetry/api';
import type { ExplicitTracer } from './explicit-spans.js';

let active = false;
let current: Tracer | undefined;
let explicit: ExplicitTracer | undefined;

export function tracingActive(): boolean {
  return active;
}

export function setTracingActive(on: boolean, explicitSpans?: ExplicitTracer): void {
  active = on;
  explicit = on ? explicitSpans : undefined;
  // A tracer belongs to the provider registered when it was taken: a restarted SDK (tests) needs a new one.
  current = undefined;
}

/** The service's tracer, from the provider registered now (the API's no-op one when tracing is off). */
export function tracer(): Tracer {
  return (current ??= trace.getTracer(SCOPE.name, SCOPE.version));
}

/** What explicit spans (explicit-spans.ts) are made with, or undefined while tracing is off. */
export function explicitTracer(): ExplicitTracer | undefined {
  return explicit;
}

/** The instrumentation scope every span of ours is exported under. */
export const SCOPE = { name: 'webhook-relay', version: '0.1.0' } as const;
