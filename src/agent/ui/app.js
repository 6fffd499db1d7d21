// tenure agent UI: a live view of the agent's locks, their terms, sessions and
// checks. Two Consul-style blocking-query loops (history, sessions) keep the
// data current without polling; a local timer only re-renders countdowns,
// ages and the timeline's growing edge from the last answers.
//
// Every string from the agent goes into the DOM through textContent or
// setAttribute, never innerHTML: key and session names are user data.
'use strict';

const TOKEN_KEY = 'tenure-ui-token';
const WAIT = '60s';
const WAIT_MS = 60e3;
const BAR_TERMS = 20;    // terms drawn in a key's timeline (the most recent)
const TABLE_TERMS = 50;  // terms listed in its table
const TICK_MS = 200;
// At most one request per feed per this many ms while the agent is busy: a
// change still shows at once, but an agent serving thousands of handovers a
// second is not asked to render the history for each of them.
const MIN_GAP_MS = 100;

// ---- small DOM helpers -------------------------------------------------------

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat()) if (k != null && k !== false) el.append(k);  // strings become text nodes
  return el;
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

function setAttr(el, name, value) {
  if (el.getAttribute(name) !== value) el.setAttribute(name, value);
}

// An element whose content depends on the clock: `fn(el)` runs on every tick.
function live(el, fn) {
  el.classList.add('live');
  el._live = fn;
  fn(el);
  return el;
}

// Keyed reconcile of `parent`'s children: a child whose data did not change
// (same signature) is kept, so text selection and scroll positions survive the
// frequent answers (the sessions feed wakes on every renewal).
function sync(parent, items, keyOf, sigOf, build) {
  const old = new Map();
  for (const c of parent.children) if (c._key != null) old.set(c._key, c);
  let prev = null;
  for (const it of items) {
    const key = keyOf(it), sig = sigOf(it);
    let el = old.get(key);
    old.delete(key);
    if (!el || el._sig !== sig) {
      const fresh = build(it);
      fresh._key = key;
      fresh._sig = sig;
      if (el) el.replaceWith(fresh);
      el = fresh;
    }
    const want = prev ? prev.nextSibling : parent.firstChild;
    if (el !== want) parent.insertBefore(el, want);
    prev = el;
  }
  for (const el of old.values()) el.remove();
  // Anything else (a placeholder) goes too.
  for (const c of [...parent.children]) if (c._key == null) c.remove();
}

// ---- formatting ----------------------------------------------------------------

// Durations in words: "0.4 s", "4 min 5 s", "2 h 3 min". mode 'up' rounds up
// (a countdown never shows 0.0 s while it runs); 'fine' gives a short span
// that is over in ms ("3 ms": a handover's gap, not "0.0 s").
function dur(ms, mode) {
  const up = mode === 'up';
  ms = Math.max(0, ms);
  if (ms < 95 && mode === 'fine') return `${Math.round(ms)} ms`;
  if (ms < 59950) return ((up ? Math.ceil(ms / 100) : Math.round(ms / 100)) / 10).toFixed(1) + ' s';
  const s = Math.floor(ms / 1e3);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor(s / 60) % 60} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor(s / 3600) % 24} h`;
}

const timeFmt = new Intl.DateTimeFormat(undefined, {
  hour: '2-digit', minute: '2-digit', second: '2-digit', fractionalSecondDigits: 1, hourCycle: 'h23',
});
const dateFmt = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric' });

function clock(ms) {
  const d = new Date(ms);
  const today = d.toDateString() === new Date().toDateString();
  return (today ? '' : dateFmt.format(d) + ' ') + timeFmt.format(d);
}

function timeEl(ms) {
  return h('time', { datetime: new Date(ms).toISOString() }, clock(ms));
}

const shortId = id => String(id).slice(0, 8);

const END_WORDS = {
  held: 'still held',
  released: 'released',
  destroyed: 'session destroyed',
  'ttl-expired': 'session TTL expired',
  'check-critical': 'a bound check went critical',
  'check-deregistered': 'a bound check was deregistered',
  'node-deregistered': 'node deregistered',
  deleted: 'key deleted',
};
const endWords = end => END_WORDS[end] || String(end);
const END_SHORT = { 'ttl-expired': 'TTL expired', 'check-critical': 'check critical', 'check-deregistered': 'check gone', 'node-deregistered': 'node gone' };
const endShort = end => END_SHORT[end] || String(end);

function statusBadge(status) {
  const s = String(status || 'unknown');
  return h('span', { class: 'st', 'data-status': s }, s);
}

// ---- ACL token (this tab only) -------------------------------------------------

let memToken = '';  // when sessionStorage is unavailable
function getToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch { return memToken; }
}
function setToken(t) {
  memToken = t;
  try { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); } catch { /* memory only */ }
}

// ---- the two feeds ---------------------------------------------------------------

const feeds = {
  history: { name: 'history', path: `../v1/tenure/history?terms=${TABLE_TERMS}` },
  sessions: { name: 'sessions', path: '../v1/tenure/sessions' },
};
for (const f of Object.values(feeds)) {
  Object.assign(f, { data: null, at: 0, lostAt: null, state: 'connecting', why: '', ctl: null, wake: null, restart: false });
}
let authMessage = '';
let tokenWanted = false;  // /v1/acl/token/self said 403
let aclKnown = false;     // that check got an answer

// With ACLs on, the agent answers the feeds for the anonymous token (filtered
// to what it may read) and 403s only a bad token, so the feeds alone cannot
// tell that a token would show more. /v1/acl/token/self can, as in Consul's
// UI: 200 the token is good, 403 none or a bad one, 401 ACLs are off.
let aclCheck = 0, aclPending = false;
async function checkToken() {
  const gen = ++aclCheck;
  aclPending = true;
  const token = getToken();
  try {
    const res = await fetch(new URL('../v1/acl/token/self', location.href), {
      headers: token ? { 'X-Consul-Token': token } : {}, cache: 'no-store', credentials: 'omit',
    });
    const text = (await res.text()).trim().slice(0, 200);
    if (gen !== aclCheck) return;  // the token changed meanwhile
    aclKnown = true;
    tokenWanted = res.status === 403;
    if (tokenWanted && token) authMessage = `The agent refused the token: ${text || 'Permission denied'}.`;
  } catch {
    // Unreachable: the feeds say so, and ask for this again once they connect.
  } finally {
    if (gen === aclCheck) aclPending = false;
  }
  changed(true);
}

// The agent's clock now, from a feed's last answer plus the browser's elapsed
// time since it arrived: clock skew between the two does not matter. While
// the agent does not answer, the clock stops where the connection was lost:
// countdowns of a state we no longer see would mislead.
function agentNow(f) {
  return f.data ? f.data.Now + ((f.lostAt ?? performance.now()) - f.at) : Date.now();
}

// A wait that a restart (new token) cuts short.
function pause(f, ms) {
  return new Promise(resolve => {
    const t = setTimeout(done, ms);
    function done() { clearTimeout(t); f.wake = null; resolve(); }
    f.wake = done;
  });
}

// Drop the current request (or wait) of both feeds and start over from index
// 0 with the token as it is now.
function restartFeeds() {
  for (const f of Object.values(feeds)) {
    f.restart = true;
    if (f.ctl) f.ctl.abort();
    if (f.wake) f.wake();
  }
}

async function run(f) {
  let index = 0, fails = 0;
  for (;;) {
    f.restart = false;
    const token = getToken();
    const url = new URL(f.path, location.href);
    if (index) {
      url.searchParams.set('index', String(index));
      url.searchParams.set('wait', WAIT);
    }
    const ctl = new AbortController();
    f.ctl = ctl;
    // A connection that silently hangs counts as lost: the agent answers by
    // `wait` (plus Consul's jitter of wait/16) at the latest.
    const timer = setTimeout(() => ctl.abort(), (index ? WAIT_MS : 0) + 15e3);
    const started = performance.now();
    let body, newIndex, problem = '';
    try {
      const res = await fetch(url, {
        headers: token ? { 'X-Consul-Token': token } : {},
        cache: 'no-store', credentials: 'omit', signal: ctl.signal,
      });
      if (res.status === 403) {
        const text = (await res.text()).trim();
        clearTimeout(timer);
        // Hide what this feed showed: it was read with a token that no longer works.
        Object.assign(f, { data: null, state: 'auth' });
        authMessage = token ? `The agent refused the token: ${text || 'Permission denied'}.` : '';
        index = 0;
        fails = 0;
        changed(true);
        await pause(f, 1e9);  // until a token is given
        continue;
      }
      if (!res.ok) {
        const text = (await res.text()).trim().slice(0, 200);
        throw new Error(`HTTP ${res.status}${text ? ': ' + text : ''}`);
      }
      newIndex = Number(res.headers.get('X-Consul-Index'));
      body = await res.json();
      if (!body || typeof body.Now !== 'number') throw new Error('unexpected answer');
    } catch (e) {
      problem = f.restart ? '' : ctl.signal.aborted ? 'no answer in time'
        : e instanceof TypeError ? 'the agent is unreachable' : (e && e.message) || 'network error';
    } finally {
      clearTimeout(timer);
      f.ctl = null;
    }
    if (f.restart) { index = 0; continue; }
    if (problem) {
      fails++;
      const secs = Math.min(10, 2 ** (fails - 1));  // 1 s, 2 s, 4 s, 8 s, 10 s ...
      Object.assign(f, { state: 'reconnecting', why: `${problem}; retrying in ${secs} s`, lostAt: f.lostAt ?? performance.now() });
      index = 0;  // the first answer after a reconnect comes at once
      changed(true);
      await pause(f, secs * 1e3);
      continue;
    }
    fails = 0;
    if (!aclKnown && !aclPending) checkToken();
    Object.assign(f, { data: body, at: performance.now(), lostAt: null, state: 'live', why: '' });
    if (f === feeds.sessions) sessionById = new Map((body.Sessions || []).map(s => [s.ID, s]));
    changed(true);
    // A larger index means news; the same one means `wait` passed. An index
    // that went backwards (agent restarted) or is missing starts over at 0.
    const same = index && newIndex === index;
    index = Number.isFinite(newIndex) && newIndex > 0 && newIndex >= index ? newIndex : 0;
    // Guard against a tight loop should the agent answer at once without news.
    if (!index || (same && performance.now() - started < 1e3)) await pause(f, 1e3);
    else if (performance.now() - started < MIN_GAP_MS) await pause(f, MIN_GAP_MS - (performance.now() - started));
  }
}

let sessionById = new Map();

// ---- rendering ---------------------------------------------------------------------

// Renders are coalesced into the next animation frame: a burst of answers
// costs one render. `full` rebuilds from the data, otherwise only the
// clock-driven parts (.live) are refreshed.
let pending = 0;
function changed(full) {
  updateStatus();
  schedule(full);
}
function schedule(full) {
  const was = pending;
  pending = Math.max(pending, full ? 2 : 1);
  if (!was) requestAnimationFrame(flush);
}
function flush() {
  const p = pending;
  pending = 0;
  if (p === 2) render();
  for (const el of document.querySelectorAll('.live')) el._live(el);
}

function updateStatus() {
  const st = Object.values(feeds).map(f => f.state);
  let state = 'connecting', text = 'Connecting to the agent…';
  if (st.every(s => s === 'live')) {
    state = 'live';
    text = 'Live: changes show as they happen.';
  } else if (st.includes('reconnecting')) {
    state = 'reconnecting';
    const f = Object.values(feeds).find(x => x.state === 'reconnecting');
    text = `Reconnecting: ${f.why}.` + (f.data ? ` Showing the state as of ${clock(agentNow(f))}.` : '');
  } else if (st.includes('auth')) {
    text = 'Waiting for an ACL token.';
  }
  const el = document.getElementById('status');
  setAttr(el, 'data-state', state);
  setText(el, text);
}

function render() {
  const needAuth = tokenWanted || Object.values(feeds).some(f => f.state === 'auth');
  const auth = document.getElementById('auth');
  if (auth.hidden === needAuth) {
    auth.hidden = !needAuth;
    if (needAuth) document.getElementById('token').focus();
  }
  setText(document.getElementById('auth-msg'), authMessage ||
    'The agent has ACLs enabled: without a token it shows only what the anonymous token may read.');
  document.getElementById('forget').hidden = !getToken();
  // Data from a feed that is not answering is dimmed (and its clock stopped).
  document.body.classList.toggle('stale', Object.values(feeds).some(f => f.state === 'reconnecting' && f.data));
  renderLocks();
  renderSessions();
  renderChecks();
}

// ---- locks ---------------------------------------------------------------------------

function renderLocks() {
  const d = feeds.history.data;
  const box = document.getElementById('locks');
  const meta = document.getElementById('locks-meta');
  if (!d) {
    setText(meta, '');
    sync(box, [], null, null, null);
    box.append(h('p', { class: 'note' }, feeds.history.state === 'auth' ? 'Not shown without an ACL token.' : 'Waiting for the agent…'));
    return;
  }
  const locks = [], registry = [], waiting = new Map();
  for (const k of d.Keys || []) {
    const m = REGISTRY.exec(k.Key);
    if (!m) { locks.push(k); continue; }
    registry.push(k);
    if (!k.Session || m[2].startsWith('.')) continue;
    if (!waiting.has(m[1])) waiting.set(m[1], []);
    waiting.get(m[1]).push(k.SessionName || shortId(k.Session));
  }
  const n = (x, word) => `${x} ${word}${x === 1 ? '' : 's'}`;
  setText(meta, `${n(locks.length, 'lock key')}${registry.length ? `, ${n(registry.length, 'candidate registry key')} (below)` : ''}. ` +
    `${n(d.Recorded, 'term')} recorded since the agent started; it keeps the last ${d.Capacity} across all keys.`);
  const item = k => ({ k, w: waiting.get(k.Key) || null });
  const card = x => lockCard(x.k, x.w);
  sync(box, locks.map(item), x => x.k.Key, x => JSON.stringify(x), card);
  if (!locks.length) box.append(h('p', { class: 'note' }, tokenWanted ? 'No lock keys that this token may read.'
    : 'No lock keys yet: a key shows here once a session takes it.'));
  document.getElementById('registry').hidden = !registry.length;
  setText(document.getElementById('registry-sum'), `Candidate registry keys (${registry.length})`);
  sync(document.getElementById('registry-list'), registry.map(item), x => x.k.Key, x => JSON.stringify(x), card);
}

// tenure's own waiters register beside a lock as `<key>.candidates/<session>`,
// each locked by its session: lock keys to the agent, but noise among the
// locks. They get a folded list of their own; each lock names its waiters.
// `.max` (locked by the waiter it names) and `.seen` are the registry's own
// bookkeeping, not waiters.
const REGISTRY = /^(.*)\.candidates\/([^/]+)$/;

const histNow = () => agentNow(feeds.history);

// One card per key. It is rebuilt whenever the key's data changes, so the
// closures below may keep `k`; only the clock moves between rebuilds.
function lockCard(k, waiting) {
  const terms = k.Terms || [];
  const state = live(h('dd', { 'data-field': 'state' }), el => {
    const now = histNow();
    let s = 'free', text = 'free';
    if (k.Session) {
      s = 'held';
      text = `held by ${k.SessionName || shortId(k.Session)}`;
    } else if (k.LockDelayUntil != null && k.LockDelayUntil > now) {
      s = 'lock-delay';
      text = `lock-delay, ${dur(k.LockDelayUntil - now, 'up')} left`;
    }
    setAttr(el, 'data-state', s);
    setText(el, text);
  });
  const fact = (label, dd) => h('div', null, h('dt', null, label), dd);
  const facts = h('dl', { class: 'facts' },
    fact('State', state),
    fact('Holder', h('dd', { 'data-field': 'holder' }, k.SessionName || '')),
    fact('Node', h('dd', { 'data-field': 'node' }, k.Node || '')),
    fact('Fencing token (LockIndex)', h('dd', { 'data-field': 'lock-index' }, String(k.LockIndex))),
    fact('Session', h('dd', null, k.Session ? h('code', { title: k.Session }, shortId(k.Session)) : '')),
    waiting ? fact('Waiting candidates', h('dd', { 'data-field': 'waiting' }, waiting.join(', '))) : '');

  const shown = terms.slice(-BAR_TERMS);
  const bar = h('div', { class: 'bar', role: 'img',
    'aria-label': `Timeline of the last ${shown.length} term${shown.length === 1 ? '' : 's'} to scale, up to now; the table below lists them.` });
  live(bar, el => drawBar(el, k, shown));
  const axis = h('div', { class: 'axis' },
    shown.length ? timeEl(shown[0].Acquired) : '', live(h('span'), el => {
      setText(el, shown.length ? `now (window ${dur(histNow() - shown[0].Acquired)})` : 'now');
    }));

  return h('article', { class: 'lock', 'data-key': k.Key },
    h('h3', null, h('code', null, k.Key)),
    facts,
    h('h4', null, 'Timeline'),
    terms.length ? [h('div', { class: 'bar-wrap' }, bar), axis] : h('p', { class: 'note' }, 'No terms recorded for this key.'),
    terms.length ? termsTable(k, terms) : '');
}

// The free stretch after an ended term, split into its lock-delay part and
// the empty rest. `next` is the following term (if any); without one the gap
// runs to now, unless the key is held by a term the agent did not record.
function gapAfter(k, t, next, now) {
  if (t.Ended == null) return null;
  const end = next ? next.Acquired : k.Session ? null : now;
  if (end == null) return null;
  const ld = t.LockDelayUntil != null ? Math.min(Math.max(t.LockDelayUntil, t.Ended), end) : t.Ended;
  return { delay: [t.Ended, Math.max(ld, t.Ended)], empty: [Math.max(ld, t.Ended), Math.max(end, ld, t.Ended)], ongoing: !next };
}

function segments(k, terms, now) {
  const segs = [];
  terms.forEach((t, i) => {
    const to = t.Ended ?? now;
    segs.push({ id: `t${t.Acquired}:${t.LockIndex}`, t, from: t.Acquired, to: Math.max(to, t.Acquired) });
    const g = gapAfter(k, t, terms[i + 1], now);
    if (!g) return;
    if (g.delay[1] > g.delay[0]) segs.push({ id: `d${t.Ended}`, gap: 'lock-delay', t, from: g.delay[0], to: g.delay[1] });
    if (g.empty[1] > g.empty[0]) segs.push({ id: `e${t.Ended}`, gap: 'empty', t, from: g.empty[0], to: g.empty[1] });
  });
  return segs;
}

// The timeline: flex items whose flex-grow is their duration, so widths are
// proportional; a min-width keeps tiny ones visible (the flex algorithm then
// shares the rest to scale). Reconciled in place on every tick.
function drawBar(bar, k, terms) {
  const segs = segments(k, terms, histNow());
  const old = new Map([...bar.children].map(c => [c._id, c]));
  let i = 0, alt = false;
  for (const s of segs) {
    let el = old.get(s.id);
    old.delete(s.id);
    if (!el) {
      el = s.gap
        ? h('div', { class: `seg gap ${s.gap}`, 'data-gap': s.gap }, h('span', null, s.gap))
        : h('div', { class: 'seg term', 'data-term': '', 'data-lock-index': String(s.t.LockIndex), 'data-end': s.t.End || 'held' },
          h('span', null, `#${s.t.LockIndex} ${endShort(s.t.End || 'held')}`));
      el._id = s.id;
    }
    if (!s.gap) {
      el.classList.toggle('alt', alt);
      alt = !alt;
    }
    if (bar.children[i] !== el) bar.insertBefore(el, bar.children[i] || null);
    el.style.flexGrow = String(s.to - s.from);
    setAttr(el, 'data-ms', String(s.to - s.from));  // for the browser test's to-scale check
    const t = s.t, span = `${clock(s.from)} to ${s.gap || t.End ? clock(s.to) : 'now'}, ${dur(s.to - s.from, 'fine')}`;
    setAttr(el, 'title', s.gap
      ? `${s.gap} after #${t.LockIndex}: ${span}`
      : `#${t.LockIndex} held by ${t.Name || shortId(t.Session)} on ${t.Node}: ${span}; ${endWords(t.End || 'held')}`);
    i++;
  }
  for (const el of old.values()) el.remove();
}

function termsTable(k, terms) {
  const list = terms.slice(-TABLE_TERMS).reverse();
  const rows = list.map(t => {
    const i = terms.indexOf(t), next = terms[i + 1];
    const heldFor = t.Ended == null
      ? live(h('td'), el => setText(el, dur(histNow() - t.Acquired) + ' so far'))
      : h('td', null, dur(t.Ended - t.Acquired, 'fine'));
    const gap = live(h('td'), el => {
      const g = gapAfter(k, t, next, histNow());
      if (!g) return setText(el, t.Ended == null ? '—' : 'unknown');
      const parts = [];
      if (g.delay[1] > g.delay[0]) parts.push(`lock-delay ${dur(g.delay[1] - g.delay[0], 'fine')}`);
      if (g.empty[1] > g.empty[0]) parts.push(`empty ${dur(g.empty[1] - g.empty[0], 'fine')}`);
      setText(el, (parts.join(', then ') || 'none') + (g.ongoing ? ' so far' : ''));
    });
    return h('tr', { 'data-lock-index': String(t.LockIndex) },
      h('th', { scope: 'row' }, `#${t.LockIndex}`),
      h('td', null, t.Name || ''),
      h('td', null, t.Node || ''),
      h('td', null, timeEl(t.Acquired)),
      heldFor,
      h('td', null, endWords(t.End || 'held')),
      gap);
  });
  const more = terms.length > list.length ? `, the last ${list.length} of ${terms.length}` : '';
  return h('details', { class: 'terms', open: true },
    h('summary', null, `Terms (${terms.length})`),
    h('div', { class: 'scroll' }, h('table', null,
      h('caption', null, `Terms of ${k.Key}, newest first${more}`),
      h('thead', null, h('tr', null, ['Token', 'Holder', 'Node', 'Acquired', 'Held for', 'Ended how', 'Gap after']
        .map(c => h('th', { scope: 'col' }, c)))),
      h('tbody', null, rows))));
}

// ---- sessions and checks -------------------------------------------------------------

function emptyRow(tbody, cols, text) {
  sync(tbody, [], null, null, null);
  tbody.append(h('tr', null, h('td', { colspan: cols, class: 'note' }, text)));
}

function renderSessions() {
  const d = feeds.sessions.data;
  const tbody = document.querySelector('#sessions tbody');
  const list = d ? d.Sessions || [] : [];
  if (!list.length) return emptyRow(tbody, 10, d ? (tokenWanted ? 'No sessions that this token may read.' : 'No sessions.') : feeds.sessions.state === 'auth' ? 'Not shown without an ACL token.' : 'Waiting for the agent…');
  // The renewal times stay out of the signature: a row is rebuilt only when
  // something else changes; its clock cells read the latest session by ID.
  const sig = s => JSON.stringify({ ...s, LastRenewed: s.LastRenewed == null, ExpiresAt: s.ExpiresAt == null });
  sync(tbody, list, s => s.ID, sig, sessionRow);
}

function sessionRow(s) {
  const id = s.ID;
  const cur = () => sessionById.get(id) || s;
  const now = () => agentNow(feeds.sessions);
  const renewed = live(h('td'), el => {
    const c = cur();
    setText(el, c.LastRenewed == null ? 'no TTL' : `renewed ${dur(now() - c.LastRenewed)} ago`);
  });
  const expires = live(h('td'), el => {
    const c = cur();
    if (c.ExpiresAt == null) return setText(el, 'never (no TTL)');
    const left = c.ExpiresAt - now();
    setText(el, left > 0 ? `expires in ${dur(left, 'up')}` : 'expiring now');
    el.classList.toggle('soon', left < 1e3);
  });
  const heldKey = k => {
    const m = REGISTRY.exec(k);  // a waiter's registry entry: say what it waits for
    return m ? h('li', { title: k }, 'waiting for ', h('code', null, m[1])) : h('li', null, h('code', null, k));
  };
  const held = s.Held && s.Held.length ? h('ul', { class: 'plain' }, s.Held.map(heldKey)) : 'none';
  const checks = s.Checks && s.Checks.length
    ? h('ul', { class: 'plain' }, s.Checks.map(c => h('li', null, statusBadge(c.Status), ' ', c.Name || c.CheckID, ' ',
      h('span', { class: 'note nw' }, `(${c.Node}/${c.CheckID})`))))
    : 'none';
  return h('tr', { 'data-session': id },
    h('th', { scope: 'row' }, s.Name || '(unnamed)'),
    h('td', null, h('code', { title: id }, shortId(id))),
    h('td', null, s.Node || ''),
    h('td', null, s.Behavior || ''),
    h('td', null, s.TTL || 'none'),
    h('td', null, s.LockDelay ? dur(s.LockDelay) : 'none'),
    renewed, expires,
    h('td', { class: 'wrap' }, held),
    h('td', { class: 'wrap' }, checks));
}

function renderChecks() {
  const d = feeds.sessions.data;
  const tbody = document.querySelector('#checks tbody');
  const list = d ? d.Checks || [] : [];
  if (!list.length) return emptyRow(tbody, 7, d ? (tokenWanted ? 'No checks that this token may read.' : 'No checks.') : feeds.sessions.state === 'auth' ? 'Not shown without an ACL token.' : 'Waiting for the agent…');
  sync(tbody, list, c => `${c.Node}\u0000${c.CheckID}`, c => JSON.stringify(c), c => h('tr', null,
    h('td', null, c.Node || ''),
    h('th', { scope: 'row' }, h('code', null, c.CheckID || '')),
    h('td', null, c.Name || ''),
    h('td', null, statusBadge(c.Status)),
    h('td', null, c.ServiceName || '—'),
    h('td', null, c.Type || '—'),
    h('td', { class: 'wrap' }, c.Output || '')));
}

// ---- start -----------------------------------------------------------------------------

document.getElementById('token-form').addEventListener('submit', ev => {
  ev.preventDefault();
  const input = document.getElementById('token');
  const t = input.value.trim();
  if (!t) return;
  setToken(t);
  input.value = '';
  authMessage = '';
  restartFeeds();
  checkToken();
  changed(true);
});

document.getElementById('forget').addEventListener('click', () => {
  setToken('');
  authMessage = '';
  for (const f of Object.values(feeds)) Object.assign(f, { data: null, state: 'connecting' });
  restartFeeds();
  checkToken();
  changed(true);
});

// The ticking clock: re-renders countdowns from the last answers, never fetches.
setInterval(() => schedule(false), TICK_MS);
for (const f of Object.values(feeds)) run(f);
checkToken();
changed(true);
