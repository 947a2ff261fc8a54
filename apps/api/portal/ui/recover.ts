// Recover: resend every webhook that failed since a time, after a dry run, at the pace the limits allow.

import { type Json, alertBox, api, can, fromLocal, h, localInput, resendPath, show, table, when } from './core.js';

export async function recover(): Promise<void> {
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
  const counts = { sent: 0, gone: 0, later: 0, skipped: 0 };
  let errors = 0;
  for (let i = 0; i < list.length && !stop; ) {
    const answer = await api('POST', resendPath(list[i].webhookId, list[i].endpointId));
    const code = answer.body?.error?.code;
    // This webhook's own limit (resent 10 times today: its Retry-After runs to the end of the day) or
    // another resend of it under way: not this one now, the next one.
    const notNow = code === 'too_many_resends' || code === 'resend_in_progress';
    if ((answer.status === 429 && !notNow) || answer.status === 503 || answer.status === 0) {
      // Rate limited or busy: wait as told, then carry on with the same webhook.
      if (++errors > 20) { text.textContent = 'Stopped: the service keeps refusing; try again later.'; break; }
      text.textContent = `${i} of ${list.length}: waiting ${answer.retryAfter || 1} s (rate limit)`;
      await new Promise((r) => setTimeout(r, (answer.retryAfter || 1) * 1000));
      continue;
    }
    if (answer.status === 200) counts.sent++; else if (answer.status === 404) counts.gone++; else if (notNow) counts.later++; else counts.skipped++;
    i++;
    bar.value = i;
    text.textContent = `${i} of ${list.length}`;
  }
  cancel.remove();
  text.textContent = `Done: ${counts.sent} resent, ${counts.gone} already resent or delivered, ${counts.later} to try again later (resent too often today, or a resend under way), ${counts.skipped} not sent (endpoint disabled or event not received).`;
}
