// The merchant's endpoints: the list, adding one, and one endpoint's settings, secret, test event and removal.

import { type Child, type Json, EVENTS, alertBox, api, can, copyButton, h, nameOf, rateText, show, table, when, ago } from './core.js';

const path = (id: string) => `/portal/api/endpoints/${encodeURIComponent(id)}`;

export function stateOf(ep: Json): Child {
  if (ep.enabled) return h('span', { class: 'badge s-delivered' }, 'enabled');
  const why = ep.disabledReason === 'failing' ? 'automatically: every attempt was failing' : ep.disabledBy === 'merchant' ? 'by you' : 'by the platform';
  return h('span', {}, h('span', { class: 'badge s-failed' }, 'disabled'), ` ${why}${ep.disabledAt ? ` since ${when(ep.disabledAt)}` : ''}`);
}

const healthOf = (ep: Json) => (!ep.enabled ? 'not sent to' : ep.failingSince ? `failing since ${when(ep.failingSince)}` : 'no failure streak');

/** Every endpoint in one table; the overview's with each one's last 24 hours. */
export function endpointsTable(list: Json[], day?: Json[]): HTMLElement {
  if (list.length === 0) return h('p', { class: 'info' }, 'No webhook endpoint is set up for this account yet.');
  return table('Your endpoints', ['Endpoint', 'URL', 'Events', 'State', 'Order', 'Rate', 'Health', ...(day ? ['Last 24 hours'] : [])], list.map((ep) => {
    const n = day?.find((c) => c.endpointId === ep.id) ?? { delivered: 0, failed: 0 };
    return [
      h('a', { href: `#/endpoints/${encodeURIComponent(ep.id)}` }, ep.description || ep.id),
      h('code', {}, ep.url),
      ep.allEvents ? 'all' : ep.events.join(', '),
      stateOf(ep),
      ep.orderByReference ? 'per reference: a refund waits for its charge' : 'none promised',
      rateText(ep),
      healthOf(ep),
      ...(day ? [h('a', { href: `#/webhooks?endpointId=${encodeURIComponent(ep.id)}` }, `${n.delivered} delivered, ${n.failed} failed`)] : [])];
  }));
}

/** The new secret, shown once: a read-only box to copy it from. */
function secretShown(secret: string, text: string): HTMLElement {
  const box = h('input', { id: 'new-secret', class: 'secret', type: 'text', readonly: true, value: secret }) as HTMLInputElement;
  const shown = h('div', {}, h('p', { class: 'ok', role: 'status' }, text), h('label', { for: 'new-secret' }, 'New signing secret'), box, h('div', { class: 'row' }, copyButton('Copy secret', () => secret)));
  queueMicrotask(() => { box.focus(); box.select(); });
  return shown;
}

function eventBoxes(checked: (event: string) => boolean, disabled = false): HTMLElement {
  return h('fieldset', { disabled }, h('legend', {}, 'Events it receives'),
    ...EVENTS.map((ev) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'events', value: ev, checked: checked(ev) }), ev)));
}

/** An endpoint form's submit: its fields read (events null: all of them), or the merchant told to choose an event. */
function submitted(out: HTMLElement, send: (data: FormData, fields: { url: string; description: string; events: string[] | null }) => Promise<void>) {
  return async (e: Event) => {
    e.preventDefault();
    const data = new FormData(e.target as HTMLFormElement);
    const events = EVENTS.filter((ev) => data.getAll('events').includes(ev));
    if (events.length === 0) return void out.replaceChildren(h('p', { class: 'alert', role: 'alert' }, 'Choose at least one event.'));
    await send(data, { url: String(data.get('url')).trim(), description: String(data.get('description') ?? '').trim(), events: events.length === EVENTS.length ? null : events });
  };
}

export async function endpoints(note?: Child): Promise<void> {
  const answer = await api('GET', '/portal/api/endpoints');
  if (answer.status !== 200) return show('Endpoints', alertBox(answer));
  const { endpoints: list, maxEndpoints } = answer.body.data;
  const sections: Child[] = [note ?? null,
    h('p', {}, 'Each endpoint receives the events it subscribes to, signed with its own secret; one failing never holds up another.'),
    endpointsTable(list)];
  if (!can('manage-endpoint')) sections.push(h('p', { class: 'note' }, 'This link lets you view the endpoints, not add or change them.'));
  else if (list.length >= maxEndpoints) sections.push(h('p', { class: 'note' }, `You have ${maxEndpoints} endpoints, the most an account may have: delete one to add another.`));
  else {
    const out = h('div', { 'aria-live': 'polite' });
    const form = h('form', { onsubmit: submitted(out, async (data, { url, description, events }) => {
      const added = await api('POST', '/portal/api/endpoints', { url, ...(description ? { description } : {}), ...(events ? { events } : {}) });
      if (added.status !== 201) return void out.replaceChildren(alertBox(added));
      const ep = added.body.data;
      await endpoints(h('div', { class: 'card' }, secretShown(ep.secret, `Endpoint ${nameOf(ep)} added. Its signing secret is shown this once: store it now.`),
        h('p', {}, h('a', { href: `#/endpoints/${encodeURIComponent(ep.id)}` }, 'Open its settings'))));
    }) },
      h('div', { class: 'field' }, h('label', { for: 'new-url' }, 'New endpoint URL'), h('input', { id: 'new-url', name: 'url', type: 'url', required: true })),
      h('div', { class: 'field' }, h('label', { for: 'new-description' }, 'Description'), h('input', { id: 'new-description', name: 'description', type: 'text', maxlength: '500' })),
      eventBoxes(() => true),
      h('button', { type: 'submit' }, 'Add endpoint'), out);
    sections.push(h('h2', {}, 'Add an endpoint'), form);
  }
  show('Endpoints', ...sections);
}

export async function endpoint(id: string): Promise<void> {
  const answer = await api('GET', path(id));
  const back = h('p', {}, h('a', { href: '#/endpoints' }, '← All endpoints'));
  if (answer.status !== 200) return show('Endpoint', back, alertBox(answer));
  const ep = answer.body.data;
  const editable = can('manage-endpoint');
  const operatorOff = !ep.enabled && ep.disabledBy === 'operator';
  const out = h('div', { 'aria-live': 'polite' });
  const form = h('form', { onsubmit: submitted(out, async (data, { url, description, events }) => {
    const max = String(data.get('maxPerSecond') ?? '').trim();
    const body = { url, description: description || null, events, maxPerSecond: max === '' ? null : Number(max), orderByReference: data.get('orderByReference') === 'on', ...(operatorOff ? {} : { enabled: data.get('enabled') === 'on' }) };
    const saved = await api('PATCH', path(id), body);
    out.replaceChildren(saved.status === 200 ? h('p', { class: 'ok', role: 'status' }, 'Saved. The next webhook goes to this URL.') : alertBox(saved));
  }) },
    h('div', { class: 'field' }, h('label', { for: 'url' }, 'Endpoint URL'),
      h('input', { id: 'url', name: 'url', type: 'url', required: true, value: ep.url, disabled: !editable, readonly: operatorOff, 'aria-describedby': 'url-note' }),
      h('p', { id: 'url-note', class: 'note' }, 'https, reachable from the internet.')),
    h('div', { class: 'field' }, h('label', { for: 'description' }, 'Description'),
      h('input', { id: 'description', name: 'description', type: 'text', maxlength: '500', value: ep.description ?? '', disabled: !editable })),
    eventBoxes((ev) => ep.events.includes(ev), !editable),
    h('div', { class: 'field' }, h('label', { for: 'max' }, 'Most webhooks per second'),
      h('input', { id: 'max', name: 'maxPerSecond', type: 'number', min: '1', max: '10000', step: '1', value: ep.maxPerSecond === null ? '' : String(ep.maxPerSecond), disabled: !editable, 'aria-describedby': 'max-note' }),
      h('p', { id: 'max-note', class: 'note' }, `Empty: no limit. Now: ${rateText(ep)}.`)),
    h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'enabled', checked: ep.enabled, disabled: !editable || operatorOff, 'aria-describedby': 'state-note' }), 'Enabled (webhooks are sent)'),
    h('p', { id: 'state-note', class: 'note' }, operatorOff ? 'The platform turned this endpoint off: only the platform can turn it on again.' : 'Now: ', operatorOff ? '' : stateOf(ep)),
    h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'orderByReference', checked: ep.orderByReference, disabled: !editable, 'aria-describedby': 'order-note' }), 'Order per reference'), h('p', { id: 'order-note', class: 'note' }, 'A webhook waits until the one before it with the same transaction reference (tnxRef; a payout\'s reference) is delivered or has failed: a refund never arrives before its charge. A reference that keeps failing holds back only its own webhooks.'),
    h('p', { class: 'note' }, ep.secretCreatedAt ? `Secret issued ${ago(ep.secretCreatedAt)} ago` : 'Secret issue date not recorded',
      ep.previousSecrets.length ? `; ${ep.previousSecrets.length} previous secret(s) still signing until ${when(ep.previousSecrets[0].expiresAt)}.` : '.'),
    editable ? h('button', { type: 'submit' }, 'Save endpoint') : null,
    out);
  show(`Endpoint ${nameOf(ep)}`, back,
    editable ? null : h('p', { class: 'note' }, 'This link lets you view the settings, not change them.'), form,
    ...(can('manage-secret') ? rotation(id) : []),
    ...(editable ? testEvent(id, ep.events) : []),
    ...(editable && !operatorOff ? removal(id, ep) : []));
}

function rotation(id: string): Child[] {
  const shown = h('div', { 'aria-live': 'polite' });
  const grace = h('select', { id: 'grace' },
    h('option', { value: '86400' }, '24 hours'), h('option', { value: '3600' }, '1 hour'), h('option', { value: '604800' }, '7 days'), h('option', { value: '0' }, 'none: stop the old secret now'));
  const rotate = h('button', { type: 'button', class: 'danger', onclick: async () => {
    (rotate as HTMLButtonElement).disabled = true;
    const done = await api('POST', `${path(id)}/secret/rotate`, { graceSeconds: Number((grace as HTMLSelectElement).value) });
    (rotate as HTMLButtonElement).disabled = false;
    if (done.status !== 200) return void shown.replaceChildren(alertBox(done));
    const until = done.body.data.previousSecretExpiresAt;
    shown.replaceChildren(secretShown(done.body.data.secret, `New secret made for this endpoint (your other endpoints keep theirs). It is shown this once: store it now.${until ? ` The old one keeps signing until ${when(until)}.` : ''}`));
  } }, 'Rotate secret');
  return [h('h2', {}, 'Signing secret'),
    h('p', {}, 'A new secret signs every webhook to this endpoint from now on; the old one also signs during the grace period, so you can switch without missing one.'),
    h('div', { class: 'field' }, h('label', { for: 'grace' }, 'Old secret keeps signing for'), grace),
    rotate, shown];
}

function testEvent(id: string, events: string[]): Child[] {
  const sent = h('div', { 'aria-live': 'polite' });
  const pick = h('select', { id: 'test-event' }, ...events.map((ev) => h('option', { value: ev }, ev)));
  return [h('h2', {}, 'Test event'),
    h('p', {}, 'Sends this endpoint a sample of the event, with a reference starting TEST-; it is attempted once, never retried, and logged like any other.'),
    h('div', { class: 'field' }, h('label', { for: 'test-event' }, 'Event'), pick),
    h('button', { type: 'button', class: 'secondary', onclick: async () => {
      const done = await api('POST', `${path(id)}/test`, { event: (pick as HTMLSelectElement).value });
      sent.replaceChildren(done.status === 202
        ? h('p', { class: 'ok', role: 'status' }, `Test event sent with reference ${done.body.data.reference}. `, h('a', { href: `#/webhooks/${encodeURIComponent(done.body.data.webhookId)}` }, 'See what happened to it'))
        : alertBox(done));
    } }, 'Send test event'), sent];
}

/** Delete asks once more, naming the endpoint, before anything is sent. */
function removal(id: string, ep: Json): Child[] {
  const out = h('div', { 'aria-live': 'polite' });
  const ask = h('button', { type: 'button', class: 'danger', onclick: () => {
    const confirm = h('button', { type: 'button', class: 'danger', onclick: async () => {
      const done = await api('DELETE', path(id));
      if (done.status !== 200) return void out.replaceChildren(alertBox(done));
      location.hash = '#/endpoints';
    } }, 'Yes, delete this endpoint');
    out.replaceChildren(h('p', { class: 'alert' }, `Nothing more will be sent to ${ep.url}. Its webhooks stay in the log.`), confirm);
    (confirm as HTMLButtonElement).focus();
  } }, 'Delete endpoint');
  return [h('h2', {}, 'Delete'), ask, out];
}
