import type { HrTime, Link } from '@opentelemetry/api';
import { TraceState } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import type { RecordedSpan } from './span-records.js';

const hrTime = (ms: number): HrTime => {
  const seconds = Math.floor(ms / 1_000);
  return [seconds, Math.round((ms - seconds * 1_000) * 1e6)];
};

const NO_EVENTS: ReadableSpan['events'] = [];

/** A span read from the records as the SDK's exporters and serializers take it. */
export function readableSpan(span: RecordedSpan, resource: Resource, scope: { name: string; version: string }): ReadableSpan {
  const traceState = span.traceState ? new TraceState(span.traceState) : undefined;
  const context = { traceId: span.traceId, spanId: span.spanId, traceFlags: span.flags, traceState };
  const links: Link[] = span.links.map((link) => ({ context: { traceId: link.traceId, spanId: link.spanId, traceFlags: 1, isRemote: true }, attributes: link.attributes as Link['attributes'] }));
  return {
    name: span.name,
    kind: span.kind,
    spanContext: () => context,
    parentSpanContext: span.parentSpanId ? { traceId: span.traceId, spanId: span.parentSpanId, traceFlags: span.flags, isRemote: span.remoteParent, traceState } : undefined,
    startTime: span.startTime,
    endTime: span.endTime,
    duration: hrTime(Math.max(0, span.endMs - span.startMs)),
    status: span.statusMessage ? { code: span.statusCode, message: span.statusMessage } : { code: span.statusCode },
    attributes: span.attributes as ReadableSpan['attributes'],
    links,
    events: NO_EVENTS,
    ended: true,
    resource,
    instrumentationScope: scope,
    droppedAttributesCount: 0,
    droppedEventsCount: 0,
    droppedLinksCount: 0,
  };
}
