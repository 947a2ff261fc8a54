// What every screen shares. No framework: every control is a native element with a visible label,
// so keyboards and screen readers work without extra wiring.

export type Json = any;
export type Child = Node | string | null | undefined | false;
export interface Answer { status: number; body: Json; retryAfter: number }
export interface Session { merchantId: string; permissions: string[]; expiresAt: string; csrfToken: string }

export const EVENTS = ['charge.completed', 'payout', 'refund.completed'];
export const STATUSES = ['delivered', 'retrying', 'failed', 'skipped'];
export const main = document.getElementById('main')!;
const live = document.getElementById('status')!;
export let session: Session | undefined;
export function setSession(next: Session | undefined): void { session = next; }

/** `svg:rect`: an element of SVG's namespace (the overview's chart). */
export function h(tag: string, attrs: Record<string, string | number | boolean | ((e: Event) => void)> = {}, ...children: Child[]): HTMLElement {
  const svg = tag.startsWith('svg:') ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4)) : undefined;
  const el = (svg as HTMLElement | undefined) ?? document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, '');
    else if (value !== false) el.setAttribute(key, String(value));
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) el.append(child);
  return el;
}

export async function api(method: string, path: string, body?: unknown): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && session) headers['x-csrf-token'] = session.csrfToken;
  try {
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin' });
    const json = await res.json().catch(() => ({ message: res.statusText }));
    return { status: res.status, body: json, retryAfter: Number(res.headers.get('retry-after') ?? '0') };
  } catch {
    return { status: 0, body: { message: 'The service could not be reached; check your connection and try again' }, retryAfter: 5 };
  }
}

export const can = (permission: string) => session?.permissions.includes(permission) ?? false;
export const when = (iso: string | null) => (iso ? new Date(iso).toLocaleString() : '—');
export const timeEl = (iso: string | null) => (iso ? h('time', { datetime: iso, title: iso }, when(iso)) : '—');
export const badge = (status: string) => h('span', { class: `badge s-${status}` }, status);
export const announce = (text: string) => { live.textContent = text; };
export const alertBox = (answer: Answer) => h('p', { class: 'alert', role: 'alert' }, String(answer.body?.message ?? `Error ${answer.status}`));
export function ago(iso: string): string {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return 'less than a minute';
  if (s < 3600) return `${Math.round(s / 60)} minutes`;
  if (s < 172800) return `${Math.round(s / 3600)} hours`;
  return `${Math.round(s / 86400)} days`;
}
/** datetime-local value (local time, minutes) ↔ ISO. */
export const localInput = (date: Date) => new Date(date.getTime() - date.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
export const fromLocal = (value: string) => (value ? new Date(value).toISOString() : undefined);

export const resendPath = (webhookId: string, endpointId: string | null) =>
  `/portal/api/webhooks/${encodeURIComponent(webhookId)}/resend${endpointId ? `?endpointId=${encodeURIComponent(endpointId)}` : ''}`;

export function table(caption: string, head: string[], rows: Child[][]): HTMLElement {
  return h('div', { class: 'scroll', tabindex: '0', role: 'region', 'aria-label': caption },
    h('table', {}, h('caption', {}, caption),
      h('thead', {}, h('tr', {}, ...head.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, ...rows.map((cells) => h('tr', {}, ...cells.map((c) => h('td', {}, c)))))));
}

export function copyButton(label: string, text: () => string): HTMLElement {
  const button = h('button', { type: 'button', class: 'secondary', onclick: async () => {
    try { await navigator.clipboard.writeText(text()); button.textContent = 'Copied'; announce('Copied to the clipboard'); }
    catch { button.textContent = 'Select and copy by hand'; }
  } }, label);
  return button;
}

export function show(title: string, ...children: Child[]): void {
  document.title = `${title} · Webhooks`;
  main.replaceChildren(h('h1', {}, title), ...children.filter((c): c is Node | string => c !== null && c !== undefined && c !== false));
  for (const a of document.querySelectorAll('nav a')) {
    const here = location.hash.startsWith(a.getAttribute('href')!);
    if (here) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
}

/** The merchant's endpoints; empty when unreadable. */
export async function endpointList(): Promise<Json[]> {
  const answer = await api('GET', '/portal/api/endpoints');
  return answer.status === 200 ? answer.body.data.endpoints : [];
}

/** An endpoint as the merchant named it, else by its URL. */
export const nameOf = (ep: Json): string => ep.description || ep.url;

/** The throttle and the rate sent at now (lower while the endpoint answers 429/503). */
export function rateText(ep: Json): string {
  const slowed = ep.currentPerSecond !== null && ep.currentPerSecond !== ep.maxPerSecond ? `slowed to ${ep.currentPerSecond}/s: your server answered 429 or 503` : '';
  return ep.maxPerSecond === null ? (slowed || 'no limit') : `at most ${ep.maxPerSecond}/s${slowed ? `; ${slowed}` : ''}`;
}
