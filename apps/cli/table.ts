// Control characters (newlines, escapes) come from message headers and bodies: never let them
// move the cursor or break a row.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;

function printable(text: string): string {
  return text.replace(CONTROL, (c) => (c === '\n' ? '\\n' : c === '\t' ? '\\t' : c === '\r' ? '\\r' : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`));
}

export function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** Columns padded to their widest cell; the last one is left ragged so long text does not pad every row. */
export function formatTable(header: string[], rows: string[][]): string {
  const cells = [header, ...rows].map((row) => row.map((cell) => printable(cell)));
  const widths = header.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? '').length)));
  return cells
    .map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ').trimEnd())
    .join('\n');
}
