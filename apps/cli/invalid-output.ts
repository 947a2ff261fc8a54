import { bodyPreview, type ParkedMessage } from './invalid-pass.js';
import { formatTable, truncate } from './table.js';

export function parkedTable(messages: ParkedMessage[]): string {
  return formatTable(
    ['CODE', 'INVALID AT', 'ROUTING KEY', 'MESSAGE ID', 'BYTES', 'REASON', 'BODY'],
    messages.map((m) => [
      m.code ?? '-',
      m.invalidAt ?? '-',
      m.originalRoutingKey ?? '-',
      m.messageId ?? '-',
      String(m.body.length),
      truncate(m.reason ?? '-', 80),
      bodyPreview(m.body),
    ]),
  );
}

export function parkedJson(m: ParkedMessage): Record<string, unknown> {
  return {
    code: m.code ?? null,
    reason: m.reason ?? null,
    invalidAt: m.invalidAt ?? null,
    originalRoutingKey: m.originalRoutingKey ?? null,
    messageId: m.messageId ?? null,
    bodyBytes: m.body.length,
    body: bodyPreview(m.body),
  };
}
