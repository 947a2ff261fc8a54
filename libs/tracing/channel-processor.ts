import type { ReadableSpan, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { SpanChannel } from './span-channel.js';
import { HAS_IS_REMOTE, IS_REMOTE } from './span-records.js';

/**
 * The SDK's spans (the API's requests, the publisher's, a resend's) handed to the export worker
 * like the explicit ones, so every program encodes and exports off its own thread. Span events
 * are not carried: nothing here records any.
 */
export class ChannelSpanProcessor implements SpanProcessor {
  constructor(private readonly channel: SpanChannel) {}

  onStart(): void {}

  onEnd(span: ReadableSpan): void {
    const context = span.spanContext();
    if ((context.traceFlags & 1) === 0) return;
    const parent = span.parentSpanContext;
    const w = this.channel.writer;
    const at = w.beginSpan();
    w.hexIds(context.traceId, context.spanId);
    w.traceState(context.traceState?.serialize() ?? '');
    w.parentHex(parent?.spanId);
    w.nameAndKind(span.name, span.kind);
    w.hrTimes(span.startTime, span.endTime);
    w.attributes(span.attributes);
    for (const link of span.links) w.link(link.context.traceId, link.context.spanId, link.attributes);
    w.statusAndFlags(span.status.code, span.status.message ?? '', (context.traceFlags & 0xff) | HAS_IS_REMOTE | (parent?.isRemote ? IS_REMOTE : 0));
    w.endSpan(at);
    this.channel.ended();
  }

  forceFlush(): Promise<void> {
    return this.channel.flush();
  }

  /** The channel is shut by setup.ts, after the provider, so the provider's last spans still go. */
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}
