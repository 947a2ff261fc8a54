/** Reading PromQL in tests: the metric names an expression uses (the dashboard's, the alert rules'). */

const PROMQL_KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'offset', 'and', 'or', 'unless', 'inf', 'nan']);

/** Metric names in a PromQL expression: identifiers that are not functions, keywords, labels, strings or durations. */
export function metricNamesIn(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names: string[] = [];
  for (const match of bare.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const isCall = bare.slice(match.index + match[0].length).trimStart().startsWith('(');
    if (!isCall && !PROMQL_KEYWORDS.has(match[0].toLowerCase())) names.push(match[0]);
  }
  return names;
}
