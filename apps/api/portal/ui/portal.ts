// The portal's entry: opens the session from the link (or the cookie), then draws the screen the address names.

import { type Answer, type Session, alertBox, api, h, main, setSession, show, when } from './core.js';
import { endpoint, endpoints } from './endpoints.js';
import { overview } from './overview.js';
import { recover } from './recover.js';
import { verify } from './verify.js';
import { webhook, webhooks } from './webhooks.js';

// An id as written when its %-encoding is malformed: the API says there is no such one.
function idOf(text: string): string {
  try { return decodeURIComponent(text); } catch { return text; }
}

async function route(): Promise<void> {
  const [path = '', search = ''] = location.hash.replace(/^#\/?/, '').split('?');
  const params = new URLSearchParams(search);
  if (path.startsWith('webhooks/')) await webhook(idOf(path.slice('webhooks/'.length)));
  else if (path === 'webhooks') await webhooks(params);
  else if (path === 'recover') await recover();
  else if (path.startsWith('endpoints/')) await endpoint(idOf(path.slice('endpoints/'.length)));
  else if (path === 'endpoints' || path === 'endpoint') await endpoints();
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
  setSession(undefined);
  document.getElementById('nav')!.hidden = true;
  document.getElementById('logout')!.hidden = true;
  document.getElementById('who')!.textContent = '';
  document.title = 'Logged out · Webhooks';
  main.replaceChildren(h('h1', {}, 'You are logged out'), h('p', {}, 'Open the portal again from your dashboard to get a new link.'));
}

const exchange = (body: object) => api('POST', '/portal/api/session', body);

/**
 * Another merchant's link over a live session, refused by the API (409): maybe one that merchant
 * sent to trick this one. Its message names both; only a click swaps the session.
 */
function askToSwitch(token: string, refused: Answer): Promise<Answer> {
  return new Promise((resolve) => {
    // One choice: the link sent twice is found used, which ends the session it opened.
    const choose = (body?: object) => async () => {
      for (const button of main.querySelectorAll('button')) button.disabled = true;
      resolve(await (body ? exchange(body) : api('GET', '/portal/api/session')));
    };
    show('Switch merchant?', alertBox(refused), h('button', { type: 'button', onclick: choose() }, 'Stay signed in'), ' ',
      h('button', { type: 'button', class: 'secondary', onclick: choose({ token, replaceSession: true }) }, 'Switch merchant'));
  });
}

async function start(): Promise<void> {
  const token = /^#token=([A-Za-z0-9_.-]+)$/.exec(location.hash)?.[1];
  // Out of the address bar and the history at once: the token works once anyway.
  if (token) history.replaceState(null, '', `${location.pathname}#/overview`);
  let answer = token ? await exchange({ token }) : await api('GET', '/portal/api/session');
  // The exchange's one 409: portal_session_other_merchant.
  if (token && answer.status === 409) answer = await askToSwitch(token, answer);
  if (answer.status !== 200 && answer.status !== 201) {
    document.title = 'Link not valid · Webhooks';
    main.replaceChildren(h('h1', {}, answer.status === 401 ? 'This link cannot be used' : 'The portal is not available'), alertBox(answer),
      h('p', {}, 'Portal links work once and expire. Open the portal again from your dashboard to get a new one.'));
    return;
  }
  const opened = answer.body.data as Session;
  setSession(opened);
  document.getElementById('who')!.textContent = `${opened.merchantId} · until ${when(opened.expiresAt)}`;
  document.getElementById('nav')!.hidden = false;
  const logout = document.getElementById('logout') as HTMLButtonElement;
  logout.hidden = false;
  logout.addEventListener('click', () => void logOut());
  window.addEventListener('hashchange', () => void route());
  await route();
}

// #main is no screen (route() would draw the overview): the skip link only moves the focus.
document.querySelector('a.skip')!.addEventListener('click', (e) => { e.preventDefault(); main.focus(); });
void start();
