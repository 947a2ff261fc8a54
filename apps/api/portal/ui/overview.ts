// The overview: the merchant's endpoints, and its webhooks over the last 24 hours with a chart.

import { type Json, STATUSES, alertBox, api, h, show, table, when } from './core.js';
import { endpointsTable } from './endpoints.js';

function chart(hours: Json[]): HTMLElement {
  const W = 720, H = 180, top = 10, bottom = 20, barW = W / 24;
  const max = Math.max(1, ...hours.map((b) => STATUSES.reduce((n, s) => n + b[s], 0)));
  const total = (s: string) => hours.reduce((n, b) => n + b[s], 0);
  const plot = h('svg:svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': `Webhooks per hour over the last 24 hours: ${STATUSES.map((s) => `${total(s)} ${s}`).join(', ')}. The table below has the numbers.` },
    h('svg:line', { x1: 0, x2: W, y1: H - bottom, y2: H - bottom }));
  hours.forEach((b, i) => {
    let y = H - bottom;
    for (const s of STATUSES) {
      const hgt = (b[s] / max) * (H - top - bottom);
      if (hgt > 0) {
        y -= hgt;
        plot.append(h('svg:rect', { x: i * barW + 2, y, width: barW - 4, height: hgt, class: s }, h('svg:title', {}, `${new Date(b.hour).getHours()}:00 ${b[s]} ${s}`)));
      }
    }
    if (i % 3 === 0) plot.append(h('svg:text', { x: i * barW + 2, y: H - 5, class: 'axis' }, `${String(new Date(b.hour).getHours()).padStart(2, '0')}:00`));
  });
  plot.append(h('svg:text', { x: 0, y: top, class: 'axis' }, `max ${max}/h`));
  return h('div', {}, plot);
}

export async function overview(): Promise<void> {
  const answer = await api('GET', '/portal/api/overview');
  if (answer.status !== 200) return show('Overview', alertBox(answer));
  const { endpoints, health } = answer.body.data;
  const endpointCard = h('section', { class: 'card', 'aria-labelledby': 'ep' }, h('h2', { id: 'ep' }, 'Endpoints'), endpointsTable(endpoints, health.endpoints));
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
