// The delivery log: the list (grouped by endpoint when unfiltered), and one webhook with its attempts and resend.

import { type Child, type Json, EVENTS, STATUSES, alertBox, announce, api, badge, can, endpointList, fromLocal, h, localInput, main, nameOf, resendPath, show, table, timeEl, when } from './core.js';
import { stateOf } from './endpoints.js';

const pageStack: string[] = [];
const FILTERS = ['status', 'event', 'reference', 'endpointId', 'since', 'until'];
const HEAD = ['Event', 'References', 'Status', 'Attempts', 'Last HTTP status'];
/** A group's page: small, since the screen asks for one per endpoint. */
const GROUP = 10;

const namesOf = (list: Json[]) => new Map<string, string>(list.map((ep) => [ep.id, nameOf(ep)]));

const row = (w: Json, ...endpoint: Child[]): Child[] => [
  h('a', { href: `#/webhooks/${encodeURIComponent(w.webhookId)}` }, when(w.firstSeenAt)), ...endpoint,
  w.event, w.references.join(', '), badge(w.status), String(w.attempts), w.lastHttpStatus === null ? '—' : String(w.lastHttpStatus)];

export async function webhooks(params: URLSearchParams): Promise<void> {
  const query = new URLSearchParams();
  for (const key of [...FILTERS, 'cursor']) { const v = params.get(key); if (v) query.set(key, v); }
  // Nothing filtered: the endpoints first, to see whether the log is shown grouped by endpoint.
  const whole = query.size === 0 && !params.has('list');
  const eps = whole ? await endpointList() : [];
  query.set('limit', '25');
  const [answer, all] = eps.length > 1 ? [undefined, eps] : await Promise.all([api('GET', `/portal/api/webhooks?${query}`), whole ? eps : endpointList()]);
  const known = namesOf(all);
  const list: Json[] = answer?.status === 200 ? answer.body.data.webhooks : [];
  // The log names each webhook's endpoint once it carries it: then a column and a filter by endpoint.
  const perEndpoint = !answer || params.has('endpointId') || list.some((w) => typeof w.endpointId === 'string');
  const select = (name: string, label: string, options: string[], text = (o: string) => o) =>
    h('div', {}, h('label', { for: `f-${name}` }, label),
      h('select', { id: `f-${name}`, name }, h('option', { value: '' }, 'any'),
        ...options.map((o) => h('option', { value: o, selected: params.get(name) === o }, text(o)))));
  const input = (name: string, label: string, type: string, value: string) =>
    h('div', {}, h('label', { for: `f-${name}` }, label), h('input', { id: `f-${name}`, name, type, value }));
  // Not a time (anyone can write the address): the field empty, the API says why.
  const local = (name: string) => { const at = new Date(params.get(name) ?? ''); return Number.isNaN(at.getTime()) ? '' : localInput(at); };
  const form = h('form', { class: 'filters', 'aria-label': 'Filters', onsubmit: (e: Event) => {
    e.preventDefault();
    const data = new FormData(e.target as HTMLFormElement);
    const next = new URLSearchParams();
    for (const key of FILTERS.slice(0, 4)) { const v = String(data.get(key) ?? '').trim(); if (v) next.set(key, v); }
    for (const key of ['since', 'until']) { const v = fromLocal(String(data.get(key) ?? '')); if (v) next.set(key, v); }
    pageStack.length = 0;
    location.hash = `#/webhooks?${next}`;
  } },
    select('status', 'Status', STATUSES), select('event', 'Event', EVENTS),
    perEndpoint ? select('endpointId', 'Endpoint', [...known.keys()], (id) => known.get(id)!) : null,
    input('reference', 'Reference', 'text', params.get('reference') ?? ''),
    input('since', 'From', 'datetime-local', local('since')), input('until', 'To', 'datetime-local', local('until')),
    h('div', {}, h('button', { type: 'submit' }, 'Apply filters')));
  if (!answer) return grouped(form, eps);
  if (answer.status !== 200) return show('Webhooks', form, alertBox(answer));
  const { nextCursor } = answer.body.data;
  const rows = list.map((w: Json) => row(w, ...(perEndpoint ? [w.endpointId ? known.get(w.endpointId) ?? w.endpointId : '—'] : [])));
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
      : table(`Webhooks, newest first${params.get('cursor') ? ' (older page)' : ''}`, ['Time', ...(perEndpoint ? ['Endpoint'] : []), ...HEAD], rows),
    pager);
}

/** One section per endpoint with its latest deliveries, two reads at a time: the log runs two of a merchant's at once. */
async function grouped(form: HTMLElement, eps: Json[]): Promise<void> {
  const fills = eps.map((ep, i) => {
    const name = nameOf(ep);
    const facts = h('p', {}, ep.description ? h('code', {}, ep.url) : null, ' ', stateOf(ep));
    const body = h('p');
    const section = h('section', { class: 'card', 'aria-labelledby': `g${i}` }, h('h2', { id: `g${i}` }, name), facts, body,
      h('a', { href: `#/webhooks?endpointId=${encodeURIComponent(ep.id)}` }, `Full log of ${name}`));
    const fill = async () => {
      const answer = await api('GET', `/portal/api/webhooks?endpointId=${encodeURIComponent(ep.id)}&limit=${GROUP}`);
      if (answer.status !== 200) return body.replaceWith(alertBox(answer));
      const list: Json[] = answer.body.data.webhooks;
      // Counted over the rows shown, not the endpoint's whole log.
      facts.append(` Latest ${list.length}: ${STATUSES.map((s) => `${list.filter((w) => w.status === s).length} ${s}`).join(', ')}`);
      body.replaceWith(list.length ? table(`Latest deliveries to ${name}, newest first`, ['Time', ...HEAD], list.map((w) => row(w))) : h('p', { class: 'info' }, 'No delivery yet.'));
    };
    return { section, fill };
  });
  show('Webhooks', form,
    h('p', {}, `Each endpoint's latest ${GROUP} deliveries. `, h('a', { href: '#/webhooks?list' }, 'All in one list')),
    ...fills.map((f) => f.section));
  let next = 0;
  // Stops once the merchant has moved to another screen: its reads would be wasted.
  const worker = async () => { while (next < fills.length && main.contains(fills[0]!.section)) await fills[next++]!.fill(); };
  await Promise.all([worker(), worker()]);
}

export async function webhook(id: string, note?: Child): Promise<void> {
  const answer = await api('GET', `/portal/api/webhooks/${encodeURIComponent(id)}`);
  if (answer.status !== 200) return show('Webhook', alertBox(answer), h('p', {}, h('a', { href: '#/webhooks' }, 'Back to the webhooks')));
  const w = answer.body.data;
  const names = namesOf(await endpointList());
  // null: the merchant's only endpoint, logged before endpoints had ids.
  const epName = (epId: string | null) => (epId === null ? '—' : names.get(epId) ?? epId);
  const epLink = (epId: string | null) => (epId === null ? '—' : h('a', { href: `#/endpoints/${encodeURIComponent(epId)}` }, epName(epId)));
  const several = w.deliveries.length > 1;
  // Each endpoint's delivery on a row of its own, with the resend of that delivery alone.
  const deliveries = w.deliveries.map((d: Json) => [epLink(d.endpointId), badge(d.status), String(d.attempts), String(d.lastHttpStatus ?? '—'),
    d.status === 'failed' && can('resend') ? h('button', { type: 'button', onclick: (e: Event) => resend(id, d, e.currentTarget as HTMLButtonElement) },
      several ? `Resend to ${epName(d.endpointId)}` : 'Resend this webhook') : '—']);
  const records = w.records.map((r: Json) => [
    timeEl(r.startedAt ?? r.at), epName(r.endpointId), badge(r.outcome === 'delivered' || r.outcome === 'failed' || r.outcome === 'skipped' ? r.outcome : 'retrying'),
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
    table("Each endpoint's delivery", ['Endpoint', 'Status', 'Attempts', 'Last HTTP status', 'Resend'], deliveries),
    h('h2', {}, 'Attempts'),
    table("Every attempt, each endpoint's in its own order, and each time none was made", ['Time', 'Endpoint', 'Outcome', 'Attempt', 'Duration', 'HTTP status', 'Error', 'Response body'], records),
    h('h2', {}, 'Payload'), h('pre', { tabindex: '0', 'aria-label': 'Payload' }, JSON.stringify(w.payload, null, 2)),
    h('h2', {}, 'Headers'),
    table('Headers sent with each attempt', ['Header', 'Value'], Object.entries(w.headers as Record<string, string>).map(([k, v]) => [h('code', {}, k), h('code', {}, v)])));
}

/** Resends one delivery (the webhook on one endpoint) and polls the log until its new attempt is in. */
async function resend(id: string, d: Json, button: HTMLButtonElement): Promise<void> {
  button.disabled = true;
  const answer = await api('POST', resendPath(id, d.endpointId));
  if (answer.status !== 200) { button.disabled = false; button.after(alertBox(answer)); return; }
  announce('Sent again; waiting for the outcome');
  const deadline = Date.now() + 30_000;
  // The log is fed from a stream: poll until the new attempt is in it.
  while (Date.now() < deadline && location.hash === `#/webhooks/${encodeURIComponent(id)}`) {
    await new Promise((r) => setTimeout(r, 700));
    const next = await api('GET', `/portal/api/webhooks/${encodeURIComponent(id)}`);
    const now = next.status === 200 && next.body.data.deliveries.find((n: Json) => n.endpointId === d.endpointId);
    if (now && now.attempts > d.attempts && now.status !== 'retrying') {
      const text = `Resent: now ${now.status}`;
      announce(text);
      return webhook(id, h('p', { class: now.status === 'delivered' ? 'ok' : 'alert', role: 'status' }, text));
    }
  }
  return webhook(id, h('p', { class: 'info', role: 'status' }, 'Sent again; the outcome is not in the log yet. Reload in a moment.'));
}
