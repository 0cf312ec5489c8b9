// The console's pages. Each reads what it shows from the API and returns
// the page as a DOM node; the app swaps it in, and builds it again when
// something changes. No page keeps state between builds.
'use strict';

(function (M) {
  const el = M.el;
  M.pages = {};

  // The device statuses (docs/api.md), in the order the fleet shows them,
  // and those an operator has to look at.
  const STATUSES = ['converged', 'progressing', 'pending', 'drifted', 'overridden', 'fighting', 'blocked', 'failed', 'stuck', 'unreachable', 'deadline-at-risk', 'deadline-missed'];
  const ATTENTION = new Set(['unreachable', 'stuck', 'failed', 'drifted', 'fighting', 'blocked', 'deadline-at-risk', 'deadline-missed']);
  const ENDED = new Set(['completed', 'aborted', 'reverted', 'superseded']);

  // What each status means, in the words of docs/api.md and the design.
  const STATUS_TEXT = {
    converged: 'Converged: every resource is applied as intended and its effective probe agrees.',
    pending: 'Pending: the device has not acknowledged its desired revision yet.',
    progressing: 'Progressing: the device acknowledged its desired state and is applying it.',
    drifted: 'Drifted: what the device runs differs from what it applied.',
    overridden: 'Overridden: a local override holds on the device.',
    blocked: 'Blocked: a precondition or a workload lock keeps the device from applying.',
    failed: 'Failed: an apply failed; the agent retries it.',
    stuck: 'Stuck: the device is connected but has made no progress past its deadline.',
    unreachable: 'Unreachable: the device has been out of contact past its threshold (a comms gap, not an apply failure).',
    fighting: 'Fighting: something on the device keeps undoing a resource; the agent backs its corrections off.',
    'deadline-at-risk': 'Deadline at risk: a resource\'s rotation deadline will be missed at the device\'s current rate (its link history and its class\'s backoff).',
    'deadline-missed': 'Deadline missed: a resource\'s rotation deadline passed and it is not applied.',
  };
  const RESOURCE_TEXT = {
    pending: 'waits for the agent to acknowledge the revision that asks for it',
    progressing: 'acknowledged, not applied yet',
    failed: 'failed to apply',
    applied: 'applied, no verdict of its effective probe yet',
    converged: 'converged',
    drifted: 'applied, but its effective probe sees something else',
    removing: 'held by the device, no longer intended: being removed',
  };

  // ---- Fleet ------------------------------------------------------------

  M.pages.fleet = async function () {
    const [st, byRegion, byRev, ros] = await Promise.all([
      M.get('/v1/status'),
      M.get('/v1/devices?group_by=region'),
      M.get('/v1/devices?group_by=acked-revision'),
      M.get('/v1/rollouts'),
    ]);
    const by = st.by_status || {};
    const notConverged = st.devices - (by.converged || 0);
    const cards = STATUSES.map((s) => {
      const n = by[s] || 0;
      const cls = 'card s-' + s + (ATTENTION.has(s) && n > 0 ? ' attention' : '');
      return M.link(M.devicesRoute({status: s}), [el('span', {class: 'count'}, String(n)), el('span', {class: 'label'}, s)],
        {class: cls, 'data-status': s});
    });
    const rollouts = new Map((ros.rollouts || []).map((r) => [r.intent, r]));
    const intents = (st.intents || []).map((p) => {
      const r = rollouts.get(p.name);
      const route = (state) => M.devicesRoute({intent: p.name, intent_state: state});
      return [
        M.link(M.intentRoute(p.name), p.name, {'data-intent': p.name}),
        String(p.revision),
        r ? M.badge(r.state) : '—',
        String(p.targeted), String(p.released), String(p.acknowledged),
        M.link(route('converged'), String(p.converged)),
        p.failed ? M.link(route('failed'), String(p.failed), {class: 'bad'}) : '0',
        p.drifted ? M.link(route('drifted'), String(p.drifted), {class: 'bad'}) : '0',
        String(p.unreachable),
        el('progress', {max: Math.max(p.targeted, 1), value: p.converged, title: M.pct(p.converged, p.targeted) + ' converged'}),
      ];
    });
    const groupTable = (list, param, title) => M.section(title,
      (list.groups || []).length === 0 ? el('p', {class: 'hint'}, 'no devices') :
        M.table([title.replace(/^By /, ''), 'devices', ''], list.groups.map((g) => [
          M.link(M.devicesRoute({[param]: g.value}), g.value || '(none)'), String(g.count),
          el('progress', {max: Math.max(list.matched, 1), value: g.count}),
        ])));
    return el('div', {id: 'fleet'},
      el('h1', null, 'Fleet'),
      el('p', {class: 'meta'}, `${M.plural(st.devices, 'device')} · cluster revision ${st.revision} · Raft index `,
        el('span', {id: 'fleet-index'}, String(st.index)), ' · ',
        notConverged > 0 ? M.link(M.devicesRoute({converged: 'false'}), `${notConverged} not converged`) : 'all converged'),
      el('div', {class: 'cards', id: 'status-cards'}, cards),
      M.section('Intents',
        intents.length === 0 ? el('p', {class: 'hint'}, 'no intents') :
          M.table(['intent', 'revision', 'rollout', 'targeted', 'released', 'acknowledged', 'converged', 'failed', 'drifted', 'unreachable', ''], intents, {id: 'intents'})),
      el('div', {class: 'columns'},
        groupTable(byRegion, 'region', 'By region'),
        groupTable(byRev, 'acked_revision', 'By acknowledged revision')));
  };

  // ---- Device lists -------------------------------------------------------

  M.pages.devices = async function (route) {
    const params = {};
    for (const [k, v] of route.params) params[k] = v;
    const list = await M.get('/v1/devices' + M.q(Object.assign({limit: 100}, params)));
    const filters = Object.entries(params).filter(([k]) => k !== 'after' && k !== 'limit');
    const chips = filters.map(([k, v]) => {
      const rest = Object.assign({}, params);
      delete rest[k];
      delete rest.after;
      return el('span', {class: 'chip'}, `${k}=${v} `, M.link(M.devicesRoute(rest), '×', {title: 'remove this filter'}));
    });
    const rows = (list.devices || []).map((d) => el('tr', {'data-device': d.id},
      el('td', null, M.link(M.deviceRoute(d.id), d.id)),
      el('td', null, M.badge(d.status)),
      el('td', {class: 'reason'}, d.status_reason || ''),
      params.intent ? el('td', null, d.intent ? [M.badge(d.intent.state), ` r${d.intent.revision}`] : '—') : null,
      el('td', null, d.connected ? 'yes' : 'no'),
      el('td', null, d.server || '—'),
      el('td', null, d.owner || '—'),
      el('td', null, `${d.acked_revision} / ${d.desired_revision}`),
      el('td', null, (d.labels || {}).region || '—'),
      el('td', null, M.ago(d.last_seen))));
    const head = ['device', 'status', 'reason'].concat(params.intent ? ['on intent'] : [],
      ['connected', 'server', 'owner', 'acked / desired', 'region', 'last seen']);
    const quick = el('p', {class: 'quick'}, 'Status: ', STATUSES.map((s) => [M.link(M.devicesRoute({status: s}), s,
      {class: ATTENTION.has(s) ? 'attention-link' : null}), ' ']), M.link(M.devicesRoute({converged: 'false'}), 'not converged'));
    const pager = el('p', {class: 'pager'},
      params.after ? M.link(M.devicesRoute(Object.assign({}, params, {after: ''})), 'first page') : null, ' ',
      list.next ? M.link(M.devicesRoute(Object.assign({}, params, {after: list.next})), 'next page →') : null);
    return el('div', {id: 'devices'},
      el('h1', null, 'Devices'),
      quick,
      el('p', {class: 'meta'}, chips.length ? chips : 'every device', ` · ${M.plural(list.matched, 'device')} matched · Raft index ${list.index}`),
      rows.length ? M.table(head, rows, {id: 'device-list'}) : el('p', {class: 'hint'}, 'no device matches'),
      pager);
  };

  // ---- Intent -------------------------------------------------------------

  M.pages.intent = async function (route) {
    const name = route.arg;
    const [doc, ro, hist] = await Promise.all([
      M.get('/v1/intents/' + M.enc(name)),
      M.get('/v1/rollouts/' + M.enc(name)),
      M.get('/v1/rollouts/' + M.enc(name) + '/history'),
    ]);
    const [events, byState, notConv] = await Promise.all([
      M.get('/v1/rollouts/' + M.enc(name) + '/events' + M.q({revision: ro.revision})),
      M.get('/v1/devices' + M.q({intent: name, group_by: 'intent-state'})),
      M.get('/v1/devices' + M.q({intent: name, intent_state: 'not-converged', limit: 20})),
    ]);
    const ended = ENDED.has(ro.state);
    const noRollout = (ro.waves || []).length === 0 && ro.wave === 0;
    const control = (action, label, enabled, extra) => el('button', {
      type: 'button', 'data-action': action, disabled: !enabled,
      onclick: () => M.openAction(Object.assign({name, action, revision: ro.revision}, extra || {})),
    }, label);
    const controls = el('div', {class: 'buttons', id: 'rollout-controls'},
      control('pause', 'Pause', !noRollout && !ended && ro.state !== 'paused'),
      control('resume', 'Resume', !noRollout && (ro.state === 'paused' || ro.state === 'aborted' || ro.state === 'reverted')),
      control('abort', 'Abort', !noRollout && !ended),
      control('undo', 'Undo…', (hist.revisions || []).length > 1));

    const waves = (ro.waves || []).map((w) => {
      const approvable = !ended && (w.state === 'waiting-approval' || (w.approval && !w.approved_by && w.state === 'pending'));
      return el('tr', {'data-wave': w.number, 'data-state': w.state},
        el('td', null, String(w.number)),
        el('td', null, w.name || ''),
        el('td', {class: 'wave-state'}, M.badge(w.state)),
        el('td', null, String(w.devices)),
        el('td', {class: 'wave-released'}, String(w.released)),
        el('td', null, String(w.converged)),
        el('td', null, w.failed ? el('span', {class: 'bad'}, String(w.failed)) : '0'),
        el('td', null, String(w.stuck)),
        el('td', null, String(w.unreachable || 0)),
        el('td', {class: 'wave-approval'}, w.approved_by ? 'approved by ' + w.approved_by : w.approval ? 'needs approval' : ''),
        el('td', {class: 'reason'}, w.waiting_for || '', (w.sample_failed || []).length ? [el('br'), 'failed: ', w.sample_failed.join(', ')] : null),
        el('td', null, approvable ? el('button', {
          type: 'button', 'data-action': 'approve', 'data-wave': w.number,
          onclick: () => M.openAction({name, action: 'approve', revision: ro.revision, wave: w.number, waveName: w.name}),
        }, 'Approve') : null));
    });

    const samples = (events.events || []).filter((e) => e.kind === 'sample' && e.counts);
    const points = samples.map((e) => ({t: Date.parse(e.time), counts: e.counts}));
    if (!ended && ro.counts) points.push({t: Date.now(), counts: ro.counts});
    else if (ro.ended_at && ro.counts) points.push({t: Date.parse(ro.ended_at), counts: ro.counts});
    const decisions = (events.events || []).filter((e) => e.kind !== 'sample');
    const marks = decisions.filter((e) => e.kind !== 'release').map((e) => ({t: Date.parse(e.time), kind: e.kind, text: e.message}));
    const chart = points.length >= 2 ? M.chart(points, marks) :
      el('p', {class: 'hint'}, 'No samples of this revision yet: the leader records the counts at most every 10 s while they change.');

    const c = ro.counts || {};
    const resources = ((doc.intent || {}).resources || []).map((r) => `${r.id} (${r.type})`).join(', ');
    return el('div', {id: 'intent', 'data-intent': name},
      el('h1', null, 'Intent ', el('span', {class: 'name'}, name)),
      el('p', {class: 'meta'}, `revision ${doc.revision} · selector ${M.labels((doc.intent || {}).selector)} · updated ${M.when(doc.updated_at)}`,
        ro.applied_by ? ` · applied by ${ro.applied_by}` : ''),
      el('p', {class: 'meta'}, 'resources: ', resources || '—'),
      el('section', {class: 'panel', id: 'rollout', 'data-state': ro.state},
        el('h2', null, `Rollout of revision ${ro.revision} `, M.badge(ro.state)),
        ro.stable_revision && ro.stable_revision !== ro.revision ? el('p', {class: 'meta'}, `devices not reached yet hold revision ${ro.stable_revision}`) : null,
        ro.waiting_for ? el('p', {class: 'waiting'}, 'Waiting for: ', el('span', {id: 'rollout-waiting'}, ro.waiting_for)) : null,
        ro.reason && ro.reason !== ro.waiting_for ? el('p', {class: 'reason'}, ro.reason) : null,
        el('p', {class: 'counts'}, `${c.targeted || 0} targeted · ${c.released || 0} released · ${c.acknowledged || 0} acknowledged · ${c.converged || 0} converged · ${c.failed || 0} failed`),
        controls,
        waves.length ? M.table(['wave', 'name', 'state', 'devices', 'released', 'converged', 'failed', 'stuck', 'unreachable', 'approval', 'waiting for', ''], waves, {id: 'waves'}) : null),
      M.section('Convergence', chart),
      el('div', {class: 'columns'},
        M.section('Devices by state on this intent',
          (byState.groups || []).length === 0 ? el('p', {class: 'hint'}, 'no devices targeted') :
            M.table(['state', 'devices'], byState.groups.map((g) => [
              M.link(M.devicesRoute({intent: name, intent_state: g.value}), g.value), String(g.count)]))),
        M.section('Not converged on it' + (notConv.matched > 20 ? ` (20 of ${notConv.matched})` : ''),
          (notConv.devices || []).length === 0 ? el('p', {class: 'hint'}, 'none') :
            [M.table(['device', 'on intent', 'status', 'reason'], notConv.devices.map((d) => [
              M.link(M.deviceRoute(d.id), d.id), d.intent ? M.badge(d.intent.state) : '—', M.badge(d.status),
              el('td', {class: 'reason'}, d.status_reason || '')])),
            notConv.matched > 20 ? M.link(M.devicesRoute({intent: name, intent_state: 'not-converged'}), 'all of them') : null])),
      M.section('Rollout timeline (revision ' + ro.revision + ')',
        decisions.length === 0 ? el('p', {class: 'hint'}, 'no decisions recorded') :
          M.table(['time', 'event', 'wave', 'what', 'by'], decisions.slice(-40).reverse().map((e) => [
            M.when(e.time), M.badge(e.kind), e.wave ? String(e.wave) : '', el('td', {class: 'reason'}, e.message || ''), e.actor || '']), {id: 'timeline'})),
      M.section('Revisions',
        M.table(['revision', 'applied', 'by', 'rollout', 'how it ended'], (hist.revisions || []).slice().reverse().map((r) => [
          r.current ? el('strong', null, `${r.revision} (current)`) : String(r.revision),
          M.when(r.time), r.applied_by || '',
          r.deleted ? M.badge('deleted') : r.rollout ? M.badge(r.rollout.state) : '—',
          el('td', {class: 'reason'}, r.rollout ? r.rollout.reason || '' : '')]), {id: 'revisions'})));
  };

  // ---- Device -------------------------------------------------------------

  M.pages.device = async function (route) {
    const id = route.arg;
    const [d, tl, ros] = await Promise.all([
      M.get('/v1/devices/' + M.enc(id)),
      M.get('/v1/devices/' + M.enc(id) + '/timeline'),
      M.get('/v1/rollouts'),
    ]);
    const states = d.resource_states || [];
    const rows = states.map((r) => el('tr', {'data-resource': r.key, 'data-state': r.state},
      el('td', null, r.key),
      el('td', null, M.badge(r.state)),
      el('td', null, el('code', null, M.short(r.intended_digest)), r.intended_revision ? ` r${r.intended_revision}` : ''),
      el('td', null, el('code', null, M.short(r.applied_digest)), r.applied_revision ? ` r${r.applied_revision}` : ''),
      el('td', null, r.effective || '—'),
      el('td', null, r.agent_state ? M.badge(r.agent_state) : '—'),
      el('td', {class: 'reason'}, r.last_error ? el('span', {class: 'bad'}, r.last_error) : '', r.last_error && r.detail ? el('br') : null, r.detail || ''),
      el('td', null, r.attempts ? String(r.attempts) : ''),
      el('td', null, M.ago(r.updated_at))));
    const local = states.filter((r) => ['drifted', 'overridden', 'blocked'].includes(r.agent_state) || r.state === 'drifted' || r.corrections > 0);
    const timeline = (tl.entries || []).slice().reverse().map((e) => [
      M.when(e.time), M.badge(e.status), String(e.revision), el('td', {class: 'reason'}, e.reason || ''), e.owner || '',
      Object.entries(e.resources || {}).map(([k, v]) => `${k}: ${v}`).join(', ')]);
    return el('div', {id: 'device', 'data-device': id},
      el('h1', null, 'Device ', el('span', {class: 'name'}, id), ' ', M.badge(d.status)),
      el('p', {class: 'meta'}, d.connected ? `connected to ${d.server}` : `not connected (last to ${d.server || 'none'})`,
        ` · owner ${d.owner || '—'} · last seen ${M.ago(d.last_seen)} · acknowledged revision ${d.acked_revision} of ${d.desired_revision}`),
      el('p', {class: 'meta'}, `labels: ${M.labels(d.labels)}`, d.labels_controlled ? ' (set by the control plane)' : ' (as the device reports them)'),
      why(d, ros.rollouts || []),
      M.section('Resources: intended, applied, effective',
        rows.length ? M.table(['resource', 'state', 'intended', 'applied', 'effective', 'agent', 'error / detail', 'attempts', 'reported'], rows, {id: 'resources'}) :
          el('p', {class: 'hint'}, 'no resources are desired of this device')),
      M.section('Drift, overrides and locks',
        d.blocked_reason ? el('p', {class: 'bad', id: 'lock'}, 'Lock: ' + d.blocked_reason) : null,
        local.length === 0 && !d.blocked_reason ? el('p', {class: 'hint'}, 'none reported') :
          el('ul', null, local.map((r) => el('li', null, `${r.key}: ${r.agent_state || r.state}`, r.detail ? ` — ${r.detail}` : '',
            r.corrections > 0 ? ` (drift corrected ${r.corrections === 1 ? 'once' : r.corrections + ' times'} since the agent started)` : '')))),
      M.section('Timeline',
        timeline.length ? M.table(['time', 'status', 'revision', 'reason', 'owner', 'resources'], timeline, {id: 'device-timeline'}) :
          el('p', {class: 'hint'}, 'no transitions recorded')));
  };

  // why explains in plain words why a device is not converged, from what
  // the server said: its status and reason, each resource's state and
  // error, and the rollouts that have not reached it yet.
  function why(d, rollouts) {
    const converged = d.status === 'converged';
    const items = [];
    items.push(el('p', {class: 'summary'}, STATUS_TEXT[d.status] || `Status ${d.status || 'unknown'}.`));
    if (d.status_reason) items.push(el('p', null, 'The server says: ', el('q', {class: 'reason'}, d.status_reason)));
    const when = [];
    if (d.status_since) when.push(`since ${M.when(d.status_since)}`);
    if (d.next_retry) when.push(`next retry ${M.when(d.next_retry)}`);
    if (when.length) items.push(el('p', {class: 'meta'}, when.join(' · ')));
    if (d.agent_status && d.agent_status !== d.status) items.push(el('p', null, `The agent reports itself ${d.agent_status}.`));
    if (d.blocked_reason) items.push(el('p', null, 'Held by a lock: ', el('q', null, d.blocked_reason)));
    const bad = (d.resource_states || []).filter((r) => r.state !== 'converged');
    if (bad.length) {
      items.push(el('ul', {class: 'resources'}, bad.map((r) => el('li', {'data-resource': r.key},
        el('strong', null, r.key), ` ${RESOURCE_TEXT[r.state] || r.state}`,
        r.last_error ? [': ', el('q', {class: 'error-text'}, r.last_error)] : '',
        r.detail && r.detail !== r.last_error ? [' — the agent says ', el('q', null, r.detail)] : '',
        r.attempts > 1 ? ` (${r.attempts} attempts)` : ''))));
    }
    // Rollouts holding the device at an older revision.
    const held = [];
    const intents = new Map();
    for (const r of d.resource_states || []) {
      const name = r.key.split('/')[0];
      intents.set(name, Math.max(intents.get(name) || 0, r.intended_revision || 0));
    }
    for (const ro of rollouts) {
      if (!intents.has(ro.intent) || ENDED.has(ro.state) || !ro.stable_revision) continue;
      const holds = intents.get(ro.intent);
      if (holds >= ro.revision) continue;
      const wave = (ro.waves || []).find((w) => w.number === ro.wave);
      held.push(el('li', {'data-intent': ro.intent},
        'Revision ', String(ro.revision), ' of ', M.link(M.intentRoute(ro.intent), ro.intent),
        ` is not released to this device yet (it holds revision ${holds}): the rollout is ${ro.state}` +
        (wave ? ` at wave ${wave.number}${wave.name ? ' (' + wave.name + ')' : ''}` : ''),
        ro.waiting_for ? [', waiting for: ', el('q', null, ro.waiting_for)] : '', '.'));
    }
    if (held.length) items.push(el('ul', {class: 'held'}, held));
    return el('section', {class: 'panel why ' + (converged ? 'ok' : 'not-ok'), id: 'why'},
      el('h2', null, converged ? 'Converged' : 'Why it is not converged'), items);
  }

  // ---- Cluster ------------------------------------------------------------

  M.pages.cluster = async function () {
    const [members, own, hash, health] = await Promise.all([
      M.get('/v1/cluster/members'),
      M.get('/v1/cluster/ownership'),
      M.get('/v1/cluster/state-hash'),
      M.get('/v1/health').catch((e) => {
        if (e.auth) throw e;
        return {healthy: false, message: e.message};
      }),
    ]);
    const rows = (members.members || []).map((m) => {
      const sc = m.state_check;
      return el('tr', {'data-member': m.id},
        el('td', null, m.leader ? el('strong', null, m.id) : m.id),
        el('td', null, m.region || ''),
        el('td', null, m.http_addr || ''),
        el('td', null, M.badge(m.gossip_state)),
        el('td', null, M.badge(m.raft_role)),
        el('td', null, m.suffrage || ''),
        el('td', null, `${m.applied_index} / ${m.last_index}`),
        el('td', null, m.version || ''),
        el('td', null, sc ? [M.badge(sc.result === 'same' ? 'converged' : sc.result === 'diverged' ? 'failed' : 'pending', sc.result),
          sc.index ? ` at ${sc.index}: ` : ' ', sc.hash ? el('code', null, M.short(sc.hash)) : '',
          sc.note ? el('span', {class: 'reason'}, ' ' + sc.note) : ''] : m.leader ? 'leader' : '—'),
        el('td', {class: 'bad'}, m.error || ''));
    });
    const shares = (own.servers || []).map((s) => [s.id, s.region || '', String(s.devices), M.pct(s.devices, own.devices),
      el('progress', {max: Math.max(own.devices, 1), value: s.devices})]);
    return el('div', {id: 'cluster'},
      el('h1', null, 'Cluster'),
      el('p', {class: 'meta'}, `leader ${members.leader || 'none'} · this server ${health.node || '?'} is `,
        health.healthy ? M.badge('converged', 'healthy') : M.badge('failed', 'not healthy'), health.message ? ` (${health.message})` : '',
        health.term ? ` · term ${health.term}` : ''),
      M.section('Servers', M.table(['server', 'region', 'HTTP', 'gossip', 'Raft role', 'suffrage', 'applied / last index', 'version', 'state hash vs leader', 'error'], rows, {id: 'members'})),
      el('div', {class: 'columns'},
        M.section('Ownership of devices', M.table(['server', 'region', 'devices', 'share', ''], shares, {id: 'ownership'}),
          own.unowned ? el('p', {class: 'bad'}, `${own.unowned} devices have no alive server to own them`) : null),
        M.section('State hash of this server',
          el('p', null, `index ${hash.index} · revision ${hash.revision}`),
          el('p', null, el('code', {class: 'hash'}, hash.hash)),
          el('p', {class: 'hint'}, 'Servers that applied the same index hold the same hash; the table compares each with the leader at a checkpoint both keep.'))));
  };

  M.pages.notfound = async function (route) {
    return el('div', null, el('h1', null, 'No such page'), el('p', null, `Nothing here at ${route.arg}. `, M.link('/', 'The fleet')));
  };
})(window.M);
