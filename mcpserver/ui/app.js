// ipybox's web page (docs/ui.md). Plain JavaScript, no dependencies.
//
// Every text that came from a kernel was escaped by the server (control
// characters and bidi overrides spelled out) and is set here as
// textContent, never as markup. HTML and SVG outputs go into an iframe
// whose sandbox allows nothing: no script, no form, no navigation.
'use strict';

// ver holds each shown cell's change count: an event is applied only if
// it is newer than what is shown. While the cells load, events of the
// session wait in held and are applied after the snapshot.
const state = { csrf: '', principal: '', session: '', cells: new Map(), ver: new Map(), loading: false, loads: 0, held: [], oldest: 0, view: 'sessions', events: null };

// csrfKey names the CSRF token in localStorage, which is per origin (so
// per port): a page of another port of this host gets the cookie, never
// the token.
const csrfKey = 'ipybox-csrf';

function $(id) { return document.getElementById(id); }

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

async function api(path, opts) {
  opts = opts || {};
  const init = { method: opts.method || 'GET', credentials: 'same-origin', headers: {} };
  if (opts.body !== undefined) {
    init.body = JSON.stringify(opts.body);
    init.headers['Content-Type'] = 'application/json';
  }
  // Another tab's sign-in replaces the cookie and the token: use the
  // newest.
  state.csrf = localStorage.getItem(csrfKey) || state.csrf;
  init.headers['X-CSRF-Token'] = state.csrf;
  const r = await fetch(path, init);
  if (r.status === 401) { showSignIn(); throw new Error('not signed in'); }
  if (!r.ok) throw new Error((await r.text()).trim());
  if (r.status === 204) return null;
  return r.json();
}

function showSignIn() {
  if (state.events) { state.events.close(); state.events = null; }
  $('nav').hidden = true;
  for (const v of ['sessions', 'inbox', 'audit']) $('view-' + v).hidden = true;
  $('signin').hidden = false;
}

async function signIn(ev) {
  ev.preventDefault();
  $('signin-error').textContent = '';
  const r = await fetch('/ui/api/signin', {
    method: 'POST', credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token: $('token').value }),
  });
  $('token').value = '';
  if (!r.ok) { $('signin-error').textContent = (await r.text()).trim(); return; }
  const me = await r.json();
  localStorage.setItem(csrfKey, me.csrf);
  state.csrf = me.csrf;
  start(me);
}

function start(me) {
  state.principal = me.principal;
  $('who').textContent = 'signed in as ' + me.principal;
  $('signin').hidden = true;
  $('nav').hidden = false;
  show(state.view);
  connect();
  loadSessions();
  loadInbox();
}

function show(view) {
  state.view = view;
  for (const v of ['sessions', 'inbox', 'audit']) {
    $('view-' + v).hidden = v !== view;
    $('tab-' + v).classList.toggle('active', v === view);
  }
  if (view === 'audit') loadAudit();
  if (view === 'inbox') loadInbox();
}

function connect() {
  if (state.events) state.events.close();
  const es = new EventSource('/ui/api/events?csrf=' + encodeURIComponent(state.csrf));
  state.events = es;
  // A reconnect may have missed events: load what is shown again.
  es.onopen = () => { loadSessions(); loadInbox(); if (state.session) loadCells(state.session); };
  es.onmessage = (m) => onEvent(JSON.parse(m.data));
  // Refused (another tab signed in anew, or the sign-in ended): the
  // browser gives up on the stream; try again with the newest token.
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED && state.events === es) {
      state.events = null;
      setTimeout(async () => {
        state.csrf = localStorage.getItem(csrfKey) || '';
        try { await api('/ui/api/me'); connect(); } catch (e) { /* api showed the sign-in */ }
      }, 1000);
    }
  };
}

function onEvent(ev) {
  switch (ev.t) {
    case 'sessions': loadSessions(); return;
    case 'approvals': loadInbox(); loadSessions(); return;
  }
  // (A cell that starts or ends changes its session's state and count:
  // the server sends 'sessions' after it.)
  if (ev.s !== state.session) return;
  if (state.loading) { state.held.push(ev); return; }
  if (ev.v <= (state.ver.get(ev.c) || 0)) return;
  state.ver.set(ev.c, ev.v);
  switch (ev.t) {
    case 'cell': addCell(ev.cell, false); break;
    case 'end': addCell(ev.cell, false); break;
    case 'item': setItem(ev.c, ev.i, ev.item); break;
    case 'append': appendText(ev.c, ev.i, ev.text); break;
  }
}

async function loadSessions() {
  const list = await api('/ui/api/sessions');
  const ul = $('sessions');
  ul.replaceChildren();
  $('no-sessions').hidden = list.length > 0;
  for (const s of list) {
    const li = el('li');
    li.dataset.session = s.id;
    li.append(el('strong', '', s.id), ' ', el('span', 'state ' + s.state.replace(/ /g, '-'), s.state));
    const info = s.cells + ' cell(s)' + (s.dropped ? ', ' + s.dropped + ' older dropped' : '') +
      (s.pending ? ', ' + s.pending + ' approval(s) pending' : '') + (s.from ? ', forked from ' + s.from : '');
    li.append(el('div', 'muted', info));
    li.classList.toggle('selected', s.id === state.session);
    li.addEventListener('click', () => selectSession(s.id));
    ul.append(li);
  }
  if (!state.session && list.length > 0) selectSession(list[list.length - 1].id);
}

function selectSession(id) {
  state.session = id;
  for (const li of $('sessions').children) li.classList.toggle('selected', li.dataset.session === id);
  $('session-head').hidden = false;
  $('session-title').textContent = 'Session ' + id;
  $('download').href = '/ui/api/notebook?session=' + encodeURIComponent(id) + '&csrf=' + encodeURIComponent(state.csrf);
  loadCells(id);
}

async function loadCells(id) {
  // Two loads may overlap (a session chosen as the stream reconnects):
  // only the last renders, and events are held until it has, so that an
  // older snapshot never replaces what a live event showed.
  const load = ++state.loads;
  state.loading = true;
  state.held = [];
  let r;
  try {
    r = await api('/ui/api/cells?session=' + encodeURIComponent(id));
  } finally {
    if (load === state.loads) state.loading = false;
  }
  if (load !== state.loads || id !== state.session) return;
  state.cells.clear();
  state.ver.clear();
  $('cells').replaceChildren();
  state.oldest = 0;
  for (const c of r.cells) addCell(c, false);
  $('older').hidden = !r.more;
  const held = state.held;
  state.held = [];
  for (const ev of held) onEvent(ev);
}

async function loadOlder() {
  const r = await api('/ui/api/cells?session=' + encodeURIComponent(state.session) + '&before=' + state.oldest);
  for (const c of r.cells.reverse()) addCell(c, true);
  $('older').hidden = !r.more;
}

// addCell shows a cell, or replaces the one with its id.
function addCell(c, atTop) {
  const box = el('div', 'cell');
  box.dataset.cell = c.id;
  const head = el('div', 'cell-head');
  head.append('[' + (c.count || ' ') + '] ', el('span', 'state ' + c.state, c.state), ' ' + new Date(c.start).toLocaleTimeString() + ' · ' + c.id);
  box.append(head, el('pre', 'code', c.code));
  const outs = el('div', 'outs');
  box.append(outs);
  for (const it of c.items) outs.append(renderItem(it));
  if (c.truncated) outs.append(el('pre', 'note', '[' + c.truncated + ' bytes of output not kept for this page]'));
  const old = state.cells.get(c.id);
  if (old) old.replaceWith(box);
  else if (atTop) $('cells').prepend(box);
  else $('cells').append(box);
  state.cells.set(c.id, box);
  if (c.v > (state.ver.get(c.id) || 0)) state.ver.set(c.id, c.v);
  if (!state.oldest || c.n < state.oldest) state.oldest = c.n;
}

function renderItem(it) {
  switch (it.kind) {
    case 'image': {
      const img = el('img', 'out-img');
      img.alt = 'image output';
      img.src = 'data:' + it.mime + ';base64,' + it.data;
      return img;
    }
    case 'html': case 'svg': {
      // An empty sandbox allows nothing: the frame runs no script, has
      // an opaque origin, and reaches nothing of this page.
      const f = el('iframe', 'markup');
      f.setAttribute('sandbox', '');
      f.setAttribute('referrerpolicy', 'no-referrer');
      f.title = it.kind + ' output';
      f.srcdoc = it.text;
      return f;
    }
    case 'error': {
      const lines = [it.name + ': ' + (it.text || '')].concat(it.trace || []);
      return el('pre', 'error', lines.join('\n'));
    }
    case 'approval': {
      const d = el('div', 'approval ' + (it.state || '').split(' ')[0]);
      d.append(el('strong', '', 'Approval: ' + it.state + (it.by ? ' — ' + it.by : '')), el('pre', '', it.text));
      return d;
    }
    default:
      return el('pre', it.kind, it.text);
  }
}

function setItem(cellID, i, it) {
  const box = state.cells.get(cellID);
  if (!box) return;
  const outs = box.querySelector('.outs');
  const node = renderItem(it);
  if (i < outs.children.length) outs.children[i].replaceWith(node);
  else outs.append(node);
}

function appendText(cellID, i, text) {
  const box = state.cells.get(cellID);
  if (!box) return;
  const node = box.querySelector('.outs').children[i];
  if (node) node.append(text);
}

async function loadInbox() {
  const list = await api('/ui/api/approvals');
  const badge = $('inbox-count');
  badge.textContent = String(list.length);
  badge.classList.toggle('zero', list.length === 0);
  $('inbox-empty').hidden = list.length > 0;
  const box = $('inbox');
  box.replaceChildren();
  for (const p of list) box.append(renderPending(p));
}

function renderPending(p) {
  const d = el('div', 'pending');
  d.dataset.approval = p.id;
  const what = p.kind === 'shell' ? 'shell command' : 'tool ' + p.server + '.' + p.tool;
  d.append(el('strong', '', 'Session ' + p.session + ', ' + p.cell + ': ' + what));
  d.append(el('pre', '', p.message));
  if (p.rule) d.append(el('div', 'muted', 'Remembering writes: ' + p.rule));
  d.append(el('div', 'muted', 'Answer by ' + new Date(p.deadline).toLocaleTimeString() + ', or the call fails in the cell.'));
  const answers = el('div', 'answers');
  p.answers.forEach((a, i) => {
    const b = el('button', a, p.titles[i]);
    b.type = 'button';
    b.dataset.answer = a;
    b.addEventListener('click', () => answer(p.id, a, d));
    answers.append(b);
  });
  const err = el('div', 'error');
  d.append(answers, err);
  return d;
}

async function answer(id, a, node) {
  try {
    await api('/ui/api/answer', { method: 'POST', body: { id: id, answer: a } });
    node.remove();
  } catch (e) {
    node.querySelector('.error').textContent = e.message;
  }
  loadInbox();
}

async function loadAudit(ev) {
  if (ev) ev.preventDefault();
  const q = new URLSearchParams({ session: $('audit-session').value, tool: $('audit-tool').value, decision: $('audit-decision').value });
  const r = await api('/ui/api/audit?' + q);
  $('audit-note').textContent = r.note || (r.rows.length + ' row(s), newest first');
  const body = $('audit').tBodies[0];
  body.replaceChildren();
  for (const e of r.rows) {
    const tr = el('tr');
    const call = e.kind === 'shell' ? e.command : e.server + '.' + e.tool + ' ' + (e.args_note || '');
    const by = e.by + (e.channel ? ' through ' + e.channel : '');
    const sess = e.page_session ? e.page_session + ' (' + e.session + ')' : (e.session || '');
    for (const v of [new Date(e.time).toLocaleString(), sess, call, e.decision, by, e.reason || '']) {
      const td = el('td');
      td.append(el('pre', '', v));
      tr.append(td);
    }
    body.append(tr);
  }
}

async function signOut() {
  try { await api('/ui/api/signout', { method: 'POST' }); } catch (e) { /* signed out anyway */ }
  localStorage.removeItem(csrfKey);
  state.csrf = '';
  state.session = '';
  showSignIn();
}

document.addEventListener('DOMContentLoaded', async () => {
  $('signin-form').addEventListener('submit', signIn);
  $('tab-sessions').addEventListener('click', () => show('sessions'));
  $('tab-inbox').addEventListener('click', () => show('inbox'));
  $('tab-audit').addEventListener('click', () => show('audit'));
  $('audit-form').addEventListener('submit', loadAudit);
  $('older').addEventListener('click', loadOlder);
  $('signout').addEventListener('click', signOut);
  state.csrf = localStorage.getItem(csrfKey) || '';
  const r = state.csrf ? await fetch('/ui/api/me', { credentials: 'same-origin', headers: { 'X-CSRF-Token': state.csrf } }) : null;
  if (r && r.ok) {
    start(await r.json());
    await loadSessions();
  } else {
    showSignIn();
  }
  // The first view is shown (the browser test reads this mark).
  performance.mark('ipybox-first-view');
});
