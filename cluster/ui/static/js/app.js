// The console's shell: routes (#/, #/devices?…, #/intent/NAME,
// #/device/ID, #/cluster), sign-in, refreshing the page when the fleet
// changes, and the rollout actions' confirmation form.
'use strict';

(function (M) {
  const $ = (id) => document.getElementById(id);
  const main = $('main');
  const REFRESH_MIN_MS = 1000;

  function parseRoute() {
    const h = location.hash.replace(/^#/, '') || '/';
    const qi = h.indexOf('?');
    const path = qi < 0 ? h : h.slice(0, qi);
    const params = new URLSearchParams(qi < 0 ? '' : h.slice(qi + 1));
    const parts = path.split('/').filter(Boolean).map((p) => {
      try { return decodeURIComponent(p); } catch (e) { return p; }
    });
    switch (parts[0]) {
      case undefined: case 'fleet': return {name: 'fleet', params};
      case 'devices': return {name: 'devices', params};
      case 'device': return {name: 'device', arg: parts.slice(1).join('/'), params};
      case 'intent': return {name: 'intent', arg: parts.slice(1).join('/'), params};
      case 'cluster': return {name: 'cluster', params};
    }
    return {name: 'notfound', arg: path, params};
  }

  // ---- Rendering ------------------------------------------------------------

  let gen = 0; // the newest render; older ones drop their result
  let running = false, dirty = false, timer = null, lastStart = 0;

  async function render() {
    const my = ++gen;
    const route = parseRoute();
    for (const a of document.querySelectorAll('[data-nav]')) {
      a.toggleAttribute('aria-current', a.dataset.nav === route.name);
    }
    try {
      const node = await M.pages[route.name](route);
      if (my !== gen) return;
      main.replaceChildren(node);
      main.dataset.page = route.name;
      main.hidden = false;
      hideNotice('error');
    } catch (e) {
      if (my !== gen) return;
      if (e.auth) {
        signIn(e.status === 401 ? `The server refused the token: ${e.message}` :
          `This token may not read this page: ${e.message}`);
        return;
      }
      notice('error', e.message);
    }
  }

  // changed asks for the current page to be read again, at most once a
  // second, never two reads at once.
  function changed() {
    if (timer) return;
    timer = setTimeout(() => {
      timer = null;
      if (running) {
        dirty = true;
        return;
      }
      refresh();
    }, Math.max(0, lastStart + REFRESH_MIN_MS - Date.now()));
  }

  async function refresh() {
    if (!$('login').hidden) return;
    running = true;
    lastStart = Date.now();
    try {
      await render();
    } finally {
      running = false;
      if (dirty) {
        dirty = false;
        changed();
      }
    }
  }
  M.refresh = changed;

  function notice(kind, text) {
    const n = $('notice');
    n.className = 'notice ' + kind;
    n.textContent = text;
    n.hidden = false;
  }
  function hideNotice(kind) {
    const n = $('notice');
    if (!kind || n.classList.contains(kind)) n.hidden = true;
  }
  M.notice = notice;

  // ---- Signing in -----------------------------------------------------------

  const live = new M.Live(changed, (mode, text) => {
    const l = $('live');
    l.dataset.mode = mode;
    l.textContent = text;
  }, (e) => signIn(`The event stream refused the token: ${e.message}`));

  function signIn(message) {
    live.stop();
    main.hidden = true;
    $('signout').hidden = !M.token();
    const m = $('login-message');
    m.textContent = message || '';
    m.hidden = !message;
    $('login').hidden = false;
    $('login-token').value = '';
    $('login-token').focus();
  }

  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const tok = $('login-token').value.trim();
    if (!tok) return;
    M.setToken(tok);
    $('login').hidden = true;
    $('signout').hidden = false;
    start();
  });

  $('signout').addEventListener('click', () => {
    M.setToken('');
    signIn('The token is forgotten: give one to go on.');
  });

  async function start() {
    await render();
    if ($('login').hidden) live.start();
  }

  // ---- Rollout actions ------------------------------------------------------

  const ACTIONS = {
    approve: (a) => `Approve wave ${a.wave}${a.waveName ? ' (' + a.waveName + ')' : ''} of ${a.name} revision ${a.revision}`,
    pause: (a) => `Pause the rollout of ${a.name} revision ${a.revision}`,
    resume: (a) => `Resume the rollout of ${a.name} revision ${a.revision}`,
    abort: (a) => `Abort the rollout of ${a.name} revision ${a.revision}`,
    undo: (a) => `Undo: make an earlier document of ${a.name} desired again`,
  };
  const HELP = {
    approve: 'The wave is released once approved (and its turn has come).',
    pause: 'No device is released until the rollout is resumed.',
    resume: 'A paused rollout carries on; an aborted or reverted one starts again from wave 1.',
    abort: 'The rollout ends, and the devices it reached go back to the stable revision.',
    undo: 'A new revision with the earlier document, rolled out by that document\'s own rollout block. History is kept.',
  };
  // What the console says once the server accepted an action; the
  // rollout's new state shows on the page as the leader acts on it.
  const DONE = {
    approve: (a) => `Wave ${a.wave} of ${a.name} revision ${a.revision} is approved.`,
    pause: (a, r) => `The rollout of ${a.name} revision ${a.revision} is ${r.state}.`,
    resume: (a, r) => `The rollout of ${a.name} revision ${a.revision} is ${r.state}.`,
    abort: (a, r) => `The rollout of ${a.name} revision ${a.revision} is ${r.state}.`,
    undo: (a, r) => r.unchanged ? `Nothing to undo: ${a.name} already holds that document (revision ${r.revision}).` :
      `Undone: revision ${r.revision} of ${a.name} holds the document of revision ${r.from_revision}.`,
  };
  let pending = null;

  // openAction asks to confirm a rollout action (and for its reason)
  // before it is sent with the operator's token.
  M.openAction = function (a) {
    pending = a;
    $('action-title').textContent = ACTIONS[a.action](a);
    $('action-help').textContent = HELP[a.action];
    $('action-reason-row').hidden = a.action === 'undo';
    $('action-revision-row').hidden = a.action !== 'undo';
    $('action-reason').value = '';
    $('action-revision').value = '';
    $('action-error').hidden = true;
    $('action-confirm').disabled = false;
    $('modal').hidden = false;
    (a.action === 'undo' ? $('action-revision') : $('action-reason')).focus();
  };

  function closeAction() {
    pending = null;
    $('modal').hidden = true;
  }
  $('action-cancel').addEventListener('click', closeAction);
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && !$('modal').hidden) closeAction();
  });

  $('action-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const a = pending;
    if (!a) return;
    const err = $('action-error');
    err.hidden = true;
    let path, body;
    if (a.action === 'undo') {
      const v = $('action-revision').value.trim();
      if (v && !/^\d+$/.test(v)) {
        err.textContent = 'The revision is a number.';
        err.hidden = false;
        return;
      }
      path = `/v1/rollouts/${M.enc(a.name)}/undo`;
      body = v ? {to_revision: Number(v)} : {};
    } else {
      path = `/v1/rollouts/${M.enc(a.name)}/${a.action}`;
      body = {revision: a.revision};
      const reason = $('action-reason').value.trim();
      if (reason) body.reason = reason;
      if (a.action === 'approve') body.wave = a.wave;
    }
    $('action-confirm').disabled = true;
    try {
      const res = await M.post(path, body);
      closeAction();
      notice('info', DONE[a.action](a, res));
      changed();
    } catch (e) {
      $('action-confirm').disabled = false;
      err.textContent = (e.status ? `${e.status}: ` : '') + e.message;
      err.hidden = false;
      if (e.status === 401) {
        closeAction();
        signIn(`The server refused the token: ${e.message}`);
      }
    }
  });

  // ---- Start ----------------------------------------------------------------

  window.addEventListener('hashchange', () => {
    if (M.takeTokenFromFragment()) {
      start();
      return;
    }
    hideNotice('info');
    render();
  });
  M.takeTokenFromFragment();
  $('signout').hidden = !M.token();
  start();
})(window.M);
