// The merchant portal's one script: a few screens drawn with the DOM from the portal's API
// (/portal/api/...), no framework and no build step beyond tsc. Every control is a native
// element with a visible label, so keyboards and screen readers work without extra wiring.

type Json = any;
type Child = Node | string | null | undefined | false;
interface Answer { status: number; body: Json; retryAfter: number }
interface Session { merchantId: string; permissions: string[]; expiresAt: string; csrfToken: string; settingsWritable: boolean }

const EVENTS = ['charge.completed', 'payout', 'refund.completed'];
const STATUSES = ['delivered', 'retrying', 'failed', 'skipped'];
const main = document.getElementById('main')!;
const live = document.getElementById('status')!;
let session: Session | undefined;

function h(tag: string, attrs: Record<string, string | boolean | ((e: Event) => void)> = {}, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, '');
    else if (value !== false) el.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) el.append(child);
  return el;
}

async function api(method: string, path: string, body?: unknown): Promise<Answer> {
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

const can = (permission: string) => session?.permissions.includes(permission) ?? false;
const when = (iso: string | null) => (iso ? new Date(iso).toLocaleString() : '—');
const timeEl = (iso: string | null) => (iso ? h('time', { datetime: iso, title: iso }, when(iso)) : '—');
const badge = (status: string) => h('span', { class: `badge s-${status}` }, status);
const announce = (text: string) => { live.textContent = text; };
const alertBox = (answer: Answer) => h('p', { class: 'alert', role: 'alert' }, String(answer.body?.message ?? `Error ${answer.status}`));
function ago(iso: string): string {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return 'less than a minute';
  if (s < 3600) return `${Math.round(s / 60)} minutes`;
  if (s < 172800) return `${Math.round(s / 3600)} hours`;
  return `${Math.round(s / 86400)} days`;
}
/** datetime-local value (local time, minutes) ↔ ISO. */
const localInput = (date: Date) => new Date(date.getTime() - date.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
const fromLocal = (value: string) => (value ? new Date(value).toISOString() : undefined);

function table(caption: string, head: string[], rows: Child[][]): HTMLElement {
  return h('div', { class: 'scroll', tabindex: '0', role: 'region', 'aria-label': caption },
    h('table', {}, h('caption', {}, caption),
      h('thead', {}, h('tr', {}, ...head.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, ...rows.map((cells) => h('tr', {}, ...cells.map((c) => h('td', {}, c)))))));
}

function copyButton(label: string, text: () => string): HTMLElement {
  const button = h('button', { type: 'button', class: 'secondary', onclick: async () => {
    try { await navigator.clipboard.writeText(text()); button.textContent = 'Copied'; announce('Copied to the clipboard'); }
    catch { button.textContent = 'Select and copy by hand'; }
  } }, label);
  return button;
}

function show(title: string, ...children: Child[]): void {
  document.title = `${title} · Webhooks`;
  main.replaceChildren(h('h1', {}, title), ...children.filter((c): c is Node | string => c !== null && c !== undefined && c !== false));
  for (const a of document.querySelectorAll('nav a')) {
    const here = location.hash.startsWith(a.getAttribute('href')!);
    if (here) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
}

// ---- Overview -------------------------------------------------------------------------------

function chart(hours: Json[]): HTMLElement {
  const W = 720, H = 180, top = 10, bottom = 20, barW = W / 24;
  const max = Math.max(1, ...hours.map((b) => STATUSES.reduce((n, s) => n + b[s], 0)));
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  const total = (s: string) => hours.reduce((n, b) => n + b[s], 0);
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('class', 'chart');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `Webhooks per hour over the last 24 hours: ${STATUSES.map((s) => `${total(s)} ${s}`).join(', ')}. The table below has the numbers.`);
  const add = (tag: string, attrs: Record<string, string | number>, text?: string) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    if (text) el.textContent = text;
    svg.append(el);
    return el;
  };
  add('line', { x1: 0, x2: W, y1: H - bottom, y2: H - bottom });
  hours.forEach((b, i) => {
    let y = H - bottom;
    for (const s of STATUSES) {
      const hgt = (b[s] / max) * (H - top - bottom);
      if (hgt > 0) {
        y -= hgt;
        const rect = add('rect', { x: i * barW + 2, y, width: barW - 4, height: hgt, class: s });
        const title = document.createElementNS(ns, 'title');
        title.textContent = `${new Date(b.hour).getHours()}:00 ${b[s]} ${s}`;
        rect.append(title);
      }
    }
    if (i % 3 === 0) add('text', { x: i * barW + 2, y: H - 5, class: 'axis' }, `${String(new Date(b.hour).getHours()).padStart(2, '0')}:00`);
  });
  add('text', { x: 0, y: top, class: 'axis' }, `max ${max}/h`);
  const wrap = h('div');
  wrap.append(svg);
  return wrap;
}

/** The throttle and the rate sent at now (lower while the endpoint answers 429/503). */
function rateText(ep: Json): string {
  const slowed = ep.currentPerSecond !== null && ep.currentPerSecond !== ep.maxPerSecond ? `slowed to ${ep.currentPerSecond}/s: your server answered 429 or 503` : '';
  return ep.maxPerSecond === null ? (slowed || 'no limit') : `at most ${ep.maxPerSecond}/s${slowed ? `; ${slowed}` : ''}`;
}

async function overview(): Promise<void> {
  const answer = await api('GET', '/portal/api/overview');
  if (answer.status !== 200) return show('Overview', alertBox(answer));
  const { endpoint, health } = answer.body.data;
  const endpointCard = endpoint
    ? h('section', { class: 'card', 'aria-labelledby': 'ep' }, h('h2', { id: 'ep' }, 'Endpoint'),
        h('dl', { class: 'facts' },
          h('dt', {}, 'URL'), h('dd', {}, h('code', {}, endpoint.url)),
          h('dt', {}, 'State'), h('dd', {}, endpoint.enabled ? h('span', { class: 'badge s-delivered' }, 'enabled')
            : h('span', {}, h('span', { class: 'badge s-failed' }, 'disabled'), ` ${endpoint.disabledReason === 'failing' ? 'automatically: every attempt was failing' : 'by hand'}${endpoint.disabledAt ? ` since ${when(endpoint.disabledAt)}` : ''}`)),
          h('dt', {}, 'Events'), h('dd', {}, endpoint.allEvents ? `all (${endpoint.events.join(', ')})` : endpoint.events.join(', ')),
          h('dt', {}, 'Order'), h('dd', {}, endpoint.orderByReference ? 'per reference: a refund waits for its charge' : 'none promised'),
          h('dt', {}, 'Rate'), h('dd', { id: 'rate' }, rateText(endpoint)),
          h('dt', {}, 'Secret'), h('dd', {}, endpoint.secretCreatedAt ? `issued ${ago(endpoint.secretCreatedAt)} ago` : 'issue date not recorded',
            endpoint.previousSecrets.length ? `; ${endpoint.previousSecrets.length} previous secret(s) still signing until ${when(endpoint.previousSecrets[0].expiresAt)}` : '')))
    : h('p', { class: 'info' }, 'No webhook endpoint is set up for this account yet.');
  const rate = health.successRate === null ? '—' : `${(health.successRate * 100).toFixed(health.successRate === 1 ? 0 : 1)}%`;
  const tile = (value: string | number, label: string, href?: string) =>
    h('li', {}, h('b', {}, String(value)), href ? h('a', { href }, label) : h('span', {}, label));
  show('Overview', endpointCard,
    h('h2', {}, 'Last 24 hours'),
    h('ul', { class: 'tiles' },
      tile(health.delivered, 'delivered', '#/webhooks?status=delivered'),
      tile(health.retrying, 'retrying', '#/webhooks?status=retrying'),
      tile(health.failed, 'failed', '#/webhooks?status=failed'),
      tile(rate, 'success rate'),
      tile(health.medianResponseMs === null ? '—' : `${health.medianResponseMs} ms`, 'typical response (median)'),
      tile(health.p95ResponseMs === null ? '—' : `${health.p95ResponseMs} ms`, 'slow response (p95)')),
    h('h2', {}, 'Webhooks per hour'),
    h('ul', { class: 'legend', 'aria-hidden': 'true' }, ...STATUSES.map((s) => h('li', {}, h('i', { class: s }), s))),
    chart(health.hours),
    h('details', {}, h('summary', {}, 'Show the numbers'),
      table('Webhooks per hour, by status now', ['Hour', ...STATUSES],
        health.hours.map((b: Json) => [when(b.hour), ...STATUSES.map((s) => String(b[s]))]))));
}

// ---- Webhooks ---------------------------------------------------------------------------------

const pageStack: string[] = [];

async function webhooks(params: URLSearchParams): Promise<void> {
  const query = new URLSearchParams();
  for (const key of ['status', 'event', 'reference', 'since', 'until', 'cursor']) { const v = params.get(key); if (v) query.set(key, v); }
  query.set('limit', '25');
  const answer = await api('GET', `/portal/api/webhooks?${query}`);
  const select = (name: string, label: string, options: string[]) =>
    h('div', {}, h('label', { for: `f-${name}` }, label),
      h('select', { id: `f-${name}`, name }, h('option', { value: '' }, 'any'),
        ...options.map((o) => h('option', { value: o, selected: params.get(name) === o }, o))));
  const input = (name: string, label: string, type: string, value: string) =>
    h('div', {}, h('label', { for: `f-${name}` }, label), h('input', { id: `f-${name}`, name, type, value }));
  const local = (name: string) => { const v = params.get(name); return v ? localInput(new Date(v)) : ''; };
  const form = h('form', { class: 'filters', 'aria-label': 'Filters', onsubmit: (e: Event) => {
    e.preventDefault();
    const data = new FormData(e.target as HTMLFormElement);
    const next = new URLSearchParams();
    for (const key of ['status', 'event', 'reference']) { const v = String(data.get(key) ?? '').trim(); if (v) next.set(key, v); }
    for (const key of ['since', 'until']) { const v = fromLocal(String(data.get(key) ?? '')); if (v) next.set(key, v); }
    pageStack.length = 0;
    location.hash = `#/webhooks?${next}`;
  } },
    select('status', 'Status', STATUSES), select('event', 'Event', EVENTS),
    input('reference', 'Reference', 'text', params.get('reference') ?? ''),
    input('since', 'From', 'datetime-local', local('since')), input('until', 'To', 'datetime-local', local('until')),
    h('div', {}, h('button', { type: 'submit' }, 'Apply filters')));
  if (answer.status !== 200) return show('Webhooks', form, alertBox(answer));
  const { webhooks: list, nextCursor } = answer.body.data;
  const rows = list.map((w: Json) => [
    h('a', { href: `#/webhooks/${encodeURIComponent(w.webhookId)}` }, when(w.firstSeenAt)),
    w.event, w.references.join(', '), badge(w.status), String(w.attempts), w.lastHttpStatus === null ? '—' : String(w.lastHttpStatus)]);
  const pager = h('div', { class: 'row' });
  const go = (cursor: string | undefined) => {
    const next = new URLSearchParams(params);
    if (cursor) next.set('cursor', cursor); else next.delete('cursor');
    location.hash = `#/webhooks?${next}`;
  };
  if (params.get('cursor')) pager.append(h('button', { type: 'button', class: 'secondary', onclick: () => go(pageStack.pop()) }, 'Newer'));
  if (nextCursor) pager.append(h('button', { type: 'button', class: 'secondary', onclick: () => { pageStack.push(params.get('cursor') ?? ''); go(nextCursor); } }, 'Older'));
  show('Webhooks', form,
    list.length === 0 ? h('p', { class: 'info' }, 'No webhook matches these filters.')
      : table(`Webhooks, newest first${params.get('cursor') ? ' (older page)' : ''}`, ['Time', 'Event', 'References', 'Status', 'Attempts', 'Last HTTP status'], rows),
    pager);
}

// ---- One webhook ------------------------------------------------------------------------------

async function webhook(id: string, note?: Child): Promise<void> {
  const answer = await api('GET', `/portal/api/webhooks/${encodeURIComponent(id)}`);
  if (answer.status !== 200) return show('Webhook', alertBox(answer), h('p', {}, h('a', { href: '#/webhooks' }, 'Back to the webhooks')));
  const w = answer.body.data;
  const actions = h('div', { class: 'row' });
  if (w.status === 'failed' && can('resend')) {
    const button = h('button', { type: 'button', onclick: () => resend(w, button as HTMLButtonElement) }, 'Resend this webhook');
    actions.append(button);
  }
  const records = w.records.map((r: Json) => [
    timeEl(r.startedAt ?? r.at), badge(r.outcome === 'delivered' || r.outcome === 'failed' || r.outcome === 'skipped' ? r.outcome : 'retrying'),
    r.startedAt ? `#${r.attemptNumber}` : 'no attempt', r.durationMs === null ? '—' : `${r.durationMs} ms`,
    r.httpStatus === null ? '—' : String(r.httpStatus),
    [r.error, r.reason].filter(Boolean).join('; ') || '—',
    r.responseBody ? h('pre', {}, r.responseBody) : '—']);
  show(`Webhook ${w.webhookId}`,
    h('p', {}, h('a', { href: '#/webhooks' }, '← All webhooks')),
    note ?? null,
    h('dl', { class: 'facts card' },
      h('dt', {}, 'Status'), h('dd', {}, badge(w.status), w.nextAttemptAt ? ` next attempt ${when(w.nextAttemptAt)}` : ''),
      h('dt', {}, 'Event'), h('dd', {}, w.event),
      h('dt', {}, 'References'), h('dd', {}, w.references.join(', ')),
      h('dt', {}, 'Attempts'), h('dd', {}, String(w.attempts)),
      h('dt', {}, 'First seen'), h('dd', {}, timeEl(w.firstSeenAt))),
    actions,
    h('h2', {}, 'Attempts'),
    table('Every attempt, oldest first, and each time none was made', ['Time', 'Outcome', 'Attempt', 'Duration', 'HTTP status', 'Error', 'Response body'], records),
    h('h2', {}, 'Payload'), h('pre', { tabindex: '0', 'aria-label': 'Payload' }, JSON.stringify(w.payload, null, 2)),
    h('h2', {}, 'Headers'),
    table('Headers sent with each attempt', ['Header', 'Value'], Object.entries(w.headers as Record<string, string>).map(([k, v]) => [h('code', {}, k), h('code', {}, v)])));
}

async function resend(w: Json, button: HTMLButtonElement): Promise<void> {
  button.disabled = true;
  const answer = await api('POST', `/portal/api/webhooks/${encodeURIComponent(w.webhookId)}/resend`);
  if (answer.status !== 200) { button.disabled = false; button.after(alertBox(answer)); return; }
  announce('Sent again; waiting for the outcome');
  const records = w.records.length;
  const deadline = Date.now() + 30_000;
  // The log is fed from a stream: poll until the new attempt is in it.
  while (Date.now() < deadline && location.hash === `#/webhooks/${encodeURIComponent(w.webhookId)}`) {
    await new Promise((r) => setTimeout(r, 700));
    const next = await api('GET', `/portal/api/webhooks/${encodeURIComponent(w.webhookId)}`);
    if (next.status === 200 && next.body.data.records.length > records && next.body.data.status !== 'retrying') {
      const text = `Resent: now ${next.body.data.status}`;
      announce(text);
      return webhook(w.webhookId, h('p', { class: next.body.data.status === 'delivered' ? 'ok' : 'alert', role: 'status' }, text));
    }
  }
  return webhook(w.webhookId, h('p', { class: 'info', role: 'status' }, 'Sent again; the outcome is not in the log yet. Reload in a moment.'));
}

// ---- Recover ----------------------------------------------------------------------------------

async function recover(): Promise<void> {
  const result = h('div');
  const form = h('form', { onsubmit: async (e: Event) => {
    e.preventDefault();
    const since = fromLocal((document.getElementById('since') as HTMLInputElement).value);
    if (!since) return;
    result.replaceChildren(h('p', {}, 'Counting…'));
    const answer = await api('GET', `/portal/api/recover?since=${encodeURIComponent(since)}`);
    if (answer.status !== 200) return void result.replaceChildren(alertBox(answer));
    const { count, webhooks: list, truncated } = answer.body.data;
    const summary = h('p', { role: 'status' }, `${count}${truncated ? '+' : ''} failed webhook(s) since ${when(since)}.`);
    if (count === 0) return void result.replaceChildren(summary);
    const go = h('button', { type: 'button', onclick: () => resendAll(list, result) }, `Resend ${count} webhook(s)`);
    result.replaceChildren(summary,
      truncated ? h('p', { class: 'note' }, 'Only the first 1,000 are shown; run this again after they are sent.') : '',
      can('resend') ? go : h('p', { class: 'note' }, 'This link does not allow resending.'),
      table('Failed webhooks to resend, oldest first', ['First seen', 'Event', 'References'],
        list.slice(0, 20).map((w: Json) => [h('a', { href: `#/webhooks/${encodeURIComponent(w.webhookId)}` }, when(w.firstSeenAt)), w.event, w.references.join(', ')])),
      list.length > 20 ? h('p', { class: 'note' }, `and ${list.length - 20} more`) : '');
    (go as HTMLButtonElement).focus();
  } },
    h('div', { class: 'field' }, h('label', { for: 'since' }, 'Failed since'),
      h('input', { id: 'since', type: 'datetime-local', required: true, value: localInput(new Date(Date.now() - 86_400_000)) })),
    h('button', { type: 'submit' }, 'Find failed webhooks'));
  show('Recover', h('p', {}, 'Resend every webhook that failed since a time: first see how many, then send them, at the pace your rate limit allows.'), form, result);
}

async function resendAll(list: Json[], result: HTMLElement): Promise<void> {
  const bar = h('progress', { max: String(list.length), value: '0', 'aria-label': 'Resent' }) as HTMLProgressElement;
  const text = h('p', { role: 'status', 'aria-live': 'polite' }, `0 of ${list.length}`);
  let stop = false;
  const cancel = h('button', { type: 'button', class: 'secondary', onclick: () => { stop = true; } }, 'Stop');
  result.replaceChildren(bar, text, cancel);
  const counts = { sent: 0, gone: 0, skipped: 0 };
  let errors = 0;
  for (let i = 0; i < list.length && !stop; ) {
    const answer = await api('POST', `/portal/api/webhooks/${encodeURIComponent(list[i].webhookId)}/resend${list[i].endpointId ? `?endpointId=${encodeURIComponent(list[i].endpointId)}` : ''}`);
    if (answer.status === 429 || answer.status === 503 || answer.status === 0) {
      // Rate limited or busy: wait as told, then carry on with the same webhook.
      if (++errors > 20) { text.textContent = 'Stopped: the service keeps refusing; try again later.'; break; }
      text.textContent = `${i} of ${list.length}: waiting ${answer.retryAfter || 1} s (rate limit)`;
      await new Promise((r) => setTimeout(r, (answer.retryAfter || 1) * 1000));
      continue;
    }
    if (answer.status === 200) counts.sent++; else if (answer.status === 404) counts.gone++; else counts.skipped++;
    i++;
    bar.value = i;
    text.textContent = `${i} of ${list.length}`;
  }
  cancel.remove();
  text.textContent = `Done: ${counts.sent} resent, ${counts.gone} already resent or delivered, ${counts.skipped} not sent (endpoint disabled or event not received).`;
}

// ---- Endpoint settings ------------------------------------------------------------------------

async function endpoint(): Promise<void> {
  const answer = await api('GET', '/portal/api/overview');
  if (answer.status !== 200) return show('Endpoint', alertBox(answer));
  const ep = answer.body.data.endpoint;
  if (!ep) return show('Endpoint', h('p', { class: 'info' }, 'No webhook endpoint is set up for this account yet.'));
  const readOnly = !session!.settingsWritable;
  const editable = !readOnly && can('manage-endpoint');
  const out = h('div', { 'aria-live': 'polite' });
  const form = h('form', { onsubmit: async (e: Event) => {
    e.preventDefault();
    const data = new FormData(e.target as HTMLFormElement);
    const events = EVENTS.filter((ev) => data.getAll('events').includes(ev));
    if (events.length === 0) return void out.replaceChildren(h('p', { class: 'alert', role: 'alert' }, 'Choose at least one event.'));
    const max = String(data.get('maxPerSecond') ?? '').trim();
    const body = { url: String(data.get('url')).trim(), enabled: data.get('enabled') === 'on', events: events.length === EVENTS.length ? null : events, maxPerSecond: max === '' ? null : Number(max), orderByReference: data.get('orderByReference') === 'on' };
    const saved = await api('PATCH', '/portal/api/endpoint', body);
    out.replaceChildren(saved.status === 200 ? h('p', { class: 'ok', role: 'status' }, 'Saved. The next webhook goes to this URL.') : alertBox(saved));
  } },
    h('div', { class: 'field' }, h('label', { for: 'url' }, 'Endpoint URL'),
      h('input', { id: 'url', name: 'url', type: 'url', required: true, value: ep.url, disabled: !editable, 'aria-describedby': 'url-note' }),
      h('p', { id: 'url-note', class: 'note' }, 'https, reachable from the internet.')),
    h('fieldset', { disabled: !editable }, h('legend', {}, 'Events it receives'),
      ...EVENTS.map((ev) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'events', value: ev, checked: ep.events.includes(ev) }), ev))),
    h('div', { class: 'field' }, h('label', { for: 'max' }, 'Most webhooks per second'),
      h('input', { id: 'max', name: 'maxPerSecond', type: 'number', min: '1', max: '10000', step: '1', value: ep.maxPerSecond === null ? '' : String(ep.maxPerSecond), disabled: !editable, 'aria-describedby': 'max-note' }),
      h('p', { id: 'max-note', class: 'note' }, `Empty: no limit. Now: ${rateText(ep)}.`)),
    h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'enabled', checked: ep.enabled, disabled: !editable }), 'Enabled (webhooks are sent)'),
    h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'orderByReference', checked: ep.orderByReference, disabled: !editable, 'aria-describedby': 'order-note' }), 'Order per reference'), h('p', { id: 'order-note', class: 'note' }, 'A webhook waits until the one before it with the same transaction reference (tnxRef; a payout\'s reference) is delivered or has failed: a refund never arrives before its charge. A reference that keeps failing holds back only its own webhooks.'),
    editable ? h('button', { type: 'submit' }, 'Save endpoint') : null,
    out);
  const sections: Child[] = [
    readOnly ? h('p', { class: 'info' }, 'Settings are read-only here: they come from the platform\'s configuration file. Ask the platform to change them.') : null,
    !readOnly && !can('manage-endpoint') ? h('p', { class: 'note' }, 'This link lets you view the settings, not change them.') : null,
    form];
  if (!readOnly && can('manage-secret')) {
    const shown = h('div', { 'aria-live': 'polite' });
    const grace = h('select', { id: 'grace' },
      h('option', { value: '86400' }, '24 hours'), h('option', { value: '3600' }, '1 hour'), h('option', { value: '604800' }, '7 days'), h('option', { value: '0' }, 'none: stop the old secret now'));
    const rotate = h('button', { type: 'button', class: 'danger', onclick: async () => {
      (rotate as HTMLButtonElement).disabled = true;
      const done = await api('POST', '/portal/api/endpoint/secret/rotate', { graceSeconds: Number((grace as HTMLSelectElement).value) });
      (rotate as HTMLButtonElement).disabled = false;
      if (done.status !== 200) return void shown.replaceChildren(alertBox(done));
      const secret: string = done.body.data.secret;
      const box = h('input', { id: 'new-secret', class: 'secret', type: 'text', readonly: true, value: secret }) as HTMLInputElement;
      shown.replaceChildren(
        h('p', { class: 'ok', role: 'status' }, `New secret made. It is shown this once: store it now.${done.body.data.previousSecretExpiresAt ? ` The old one keeps signing until ${when(done.body.data.previousSecretExpiresAt)}.` : ''}`),
        h('label', { for: 'new-secret' }, 'New signing secret'), box, h('div', { class: 'row' }, copyButton('Copy secret', () => secret)));
      box.focus();
      box.select();
    } }, 'Rotate secret');
    sections.push(h('h2', {}, 'Signing secret'),
      h('p', {}, 'A new secret signs every webhook from now on; the old one also signs during the grace period, so you can switch without missing one.'),
      h('div', { class: 'field' }, h('label', { for: 'grace' }, 'Old secret keeps signing for'), grace),
      rotate, shown);
  }
  if (can('manage-endpoint')) {
    const sent = h('div', { 'aria-live': 'polite' });
    const pick = h('select', { id: 'test-event' }, ...EVENTS.map((ev) => h('option', { value: ev }, ev)));
    sections.push(h('h2', {}, 'Test event'),
      h('p', {}, 'Sends a sample of the event to the endpoint, with a reference starting TEST-; it is attempted once, never retried, and logged like any other.'),
      h('div', { class: 'field' }, h('label', { for: 'test-event' }, 'Event'), pick),
      h('button', { type: 'button', class: 'secondary', onclick: async () => {
        const done = await api('POST', '/portal/api/endpoint/test', { event: (pick as HTMLSelectElement).value });
        sent.replaceChildren(done.status === 202
          ? h('p', { class: 'ok', role: 'status' }, `Test event sent with reference ${done.body.data.reference}. `, h('a', { href: `#/webhooks/${encodeURIComponent(done.body.data.webhookId)}` }, 'See what happened to it'))
          : alertBox(done));
      } }, 'Send test event'), sent);
  }
  show('Endpoint', ...sections);
}

// ---- Verify -----------------------------------------------------------------------------------

async function verify(): Promise<void> {
  const answer = await api('GET', '/portal/api/overview');
  const url = answer.status === 200 && answer.body.data.endpoint ? new URL(answer.body.data.endpoint.url) : new URL('https://example.com/webhooks');
  // Every value from the endpoint goes in as a JSON literal (a valid JavaScript and Python literal
  // too): the URL is the merchant's to set, and a path such as /'+eval(...)+' would otherwise be
  // code on the machine of whoever copies the snippet.
  const path = JSON.stringify(url.pathname);
  const port = JSON.stringify(Number(url.port) || (url.protocol === 'https:' ? 443 : 80));
  const node = `// npm install standardwebhooks express
import express from 'express';
import { Webhook } from 'standardwebhooks';

const wh = new Webhook(process.env.WEBHOOK_SECRET); // whsec_... from the Endpoint screen
const app = express();

app.post(${path}, express.raw({ type: 'application/json' }), (req, res) => {
  try {
    // Checks webhook-id, webhook-timestamp (5 minutes) and every signature in webhook-signature.
    const { event, data } = wh.verify(req.body, req.headers);
    // Store req.headers['webhook-id'] and skip an id you have seen: a resend keeps it.
    res.sendStatus(204);
  } catch {
    res.sendStatus(400);
  }
});
app.listen(${port});`;
  const python = `# pip install standardwebhooks flask
import os
from flask import Flask, request
from standardwebhooks.webhooks import Webhook

wh = Webhook(os.environ["WEBHOOK_SECRET"])  # whsec_... from the Endpoint screen
app = Flask(__name__)

@app.post(${path})
def webhook():
    try:
        payload = wh.verify(request.get_data(), dict(request.headers))
    except Exception:
        return "", 400
    # payload["event"], payload["data"]; request.headers["webhook-id"] stays the same on a resend
    return "", 204`;
  show('Verify signatures',
    h('p', {}, 'Every webhook is signed the Standard Webhooks way: webhook-signature holds v1,<base64 HMAC-SHA256> of "webhook-id.webhook-timestamp.body", made with your secret (and with the old secret too during a rotation). Verify the raw body, before parsing it.'),
    h('h2', {}, 'Node.js'), h('pre', { tabindex: '0', 'aria-label': 'Node.js example' }, node), h('div', { class: 'row' }, copyButton('Copy Node.js example', () => node)),
    h('h2', {}, 'Python'), h('pre', { tabindex: '0', 'aria-label': 'Python example' }, python), h('div', { class: 'row' }, copyButton('Copy Python example', () => python)));
}

// ---- Start ------------------------------------------------------------------------------------

async function route(): Promise<void> {
  const [path = '', search = ''] = location.hash.replace(/^#\/?/, '').split('?');
  const params = new URLSearchParams(search);
  if (path.startsWith('webhooks/')) await webhook(decodeURIComponent(path.slice('webhooks/'.length)));
  else if (path === 'webhooks') await webhooks(params);
  else if (path === 'recover') await recover();
  else if (path === 'endpoint') await endpoint();
  else if (path === 'verify') await verify();
  else await overview();
  // Focus moves to the new screen (screen readers announce it) without scrolling past the header.
  window.scrollTo(0, 0);
  main.focus({ preventScroll: true });
}

/** Ends the session on the server (the cookie alone would only forget it here), then says so. */
async function logOut(): Promise<void> {
  const answer = await api('POST', '/portal/api/logout');
  if (answer.status !== 200) return void main.replaceChildren(h('h1', {}, 'Not logged out'), alertBox(answer));
  session = undefined;
  document.getElementById('nav')!.hidden = true;
  document.getElementById('logout')!.hidden = true;
  document.getElementById('who')!.textContent = '';
  document.title = 'Logged out · Webhooks';
  main.replaceChildren(h('h1', {}, 'You are logged out'), h('p', {}, 'Open the portal again from your dashboard to get a new link.'));
}

async function start(): Promise<void> {
  const token = /^#token=([A-Za-z0-9_.-]+)$/.exec(location.hash)?.[1];
  let answer: Answer;
  if (token) {
    // Out of the address bar and the history at once: the token works once anyway.
    history.replaceState(null, '', `${location.pathname}#/overview`);
    answer = await api('POST', '/portal/api/session', { token });
  } else {
    answer = await api('GET', '/portal/api/session');
  }
  if (answer.status !== 200 && answer.status !== 201) {
    document.title = 'Link not valid · Webhooks';
    main.replaceChildren(h('h1', {}, answer.status === 401 ? 'This link cannot be used' : 'The portal is not available'), alertBox(answer),
      h('p', {}, 'Portal links work once and expire. Open the portal again from your dashboard to get a new one.'));
    return;
  }
  session = answer.body.data as Session;
  document.getElementById('who')!.textContent = `${session.merchantId} · until ${when(session.expiresAt)}`;
  document.getElementById('nav')!.hidden = false;
  const logout = document.getElementById('logout') as HTMLButtonElement;
  logout.hidden = false;
  logout.addEventListener('click', () => void logOut());
  window.addEventListener('hashchange', () => void route());
  await route();
}

void start();

export {};
