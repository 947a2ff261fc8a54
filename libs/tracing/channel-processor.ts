import type { HrTime } from '@opentelemetry/api';
import type { ReadableSpan, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { SpanChannel } from './span-channel.js';
import { BITS, INLINE, STATUS_SHIFT } from './span-records.js';

const ms = (time: HrTime): number => time[0] * 1_000 + time[1] / 1e6;

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
    const traceState = context.traceState?.serialize() ?? '';
    const message = span.status.message ?? '';
    const bits =
      (context.traceFlags & 0xff) |
      (parent?.isRemote ? BITS.remoteParent : 0) |
      (traceState ? BITS.state : 0) |
      (message ? BITS.message : 0) |
      (span.links.length > 0 ? BITS.links : 0) |
      (span.status.code << STATUS_SHIFT);
    const w = this.channel.writer;
    w.u32(INLINE);
    w.string(span.name);
    w.u8(span.kind);
    w.id(context.traceId, 16);
    w.id(context.spanId, 8);
    w.id(parent?.spanId ?? '', 8);
    w.u32(bits);
    w.f64(ms(span.startTime));
    w.f64(ms(span.endTime));
    if (traceState) w.string(traceState);
    if (message) w.string(message);
    w.attributes(span.attributes);
    if (span.links.length > 0) {
      w.u16(span.links.length);
      for (const link of span.links) {
        w.id(link.context.traceId, 16);
        w.id(link.context.spanId, 8);
        w.attributes(link.attributes);
      }
    }
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
