// DOM and formatting helpers shared by the console's scripts. Every text
// from the API goes into the page as text (textContent), never as HTML.
'use strict';

window.M = window.M || {};

(function (M) {
  // el builds an element: el('a', {href: '#/', class: 'x'}, 'text', child).
  // Attributes with null, undefined or false values are left out; on* keys
  // add event listeners.
  M.el = function (tag, attrs, ...children) {
    const e = document.createElement(tag);
    M.setAttrs(e, attrs);
    M.append(e, children);
    return e;
  };

  const SVG = 'http://www.w3.org/2000/svg';
  M.svg = function (tag, attrs, ...children) {
    const e = document.createElementNS(SVG, tag);
    M.setAttrs(e, attrs);
    M.append(e, children);
    return e;
  };

  M.setAttrs = function (e, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') {
        e.addEventListener(k.slice(2), v);
      } else {
        e.setAttribute(k, v === true ? '' : String(v));
      }
    }
  };

  M.append = function (e, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  };

  // link is an anchor to a console route.
  M.link = function (route, text, attrs) {
    return M.el('a', Object.assign({href: '#' + route}, attrs || {}), text);
  };

  M.routeOf = function (path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== '' && v !== null && v !== undefined) q.set(k, v);
    }
    const qs = q.toString();
    return path + (qs ? '?' + qs : '');
  };

  M.deviceRoute = (id) => '/device/' + encodeURIComponent(id);
  M.intentRoute = (name) => '/intent/' + encodeURIComponent(name);
  M.devicesRoute = (params) => M.routeOf('/devices', params);

  // table builds a table from a header row and rows of cells.
  M.table = function (head, rows, attrs) {
    return M.el('table', attrs,
      M.el('thead', null, M.el('tr', null, head.map((h) => M.el('th', null, h)))),
      M.el('tbody', null, rows.map((r) => r instanceof Node ? r : M.el('tr', null, r.map((c) => c instanceof Node && c.tagName === 'TD' ? c : M.el('td', null, c))))));
  };

  M.badge = function (state, text) {
    return M.el('span', {class: 'badge s-' + String(state || 'none').replace(/[^a-z-]/g, '')}, text || state || '—');
  };

  M.section = function (title, ...children) {
    return M.el('section', {class: 'panel'}, M.el('h2', null, title), children);
  };

  M.when = function (t) {
    if (!t) return '—';
    const d = new Date(t);
    if (isNaN(d.getTime()) || d.getTime() <= 0) return '—';
    return d.toLocaleString();
  };

  M.ago = function (t) {
    if (!t) return '—';
    const ms = Date.now() - new Date(t).getTime();
    if (!(ms >= 0)) return M.when(t);
    const s = Math.round(ms / 1000);
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.round(s / 60) + ' min ago';
    if (s < 86400) return Math.round(s / 3600) + ' h ago';
    return M.when(t);
  };

  M.short = (digest) => digest ? String(digest).slice(0, 12) : '—';

  M.plural = (n, one, many) => n + ' ' + (n === 1 ? one : (many || one + 's'));

  M.pct = (n, of) => of > 0 ? Math.floor(100 * n / of) + ' %' : '—';

  M.labels = function (labels) {
    const keys = Object.keys(labels || {}).sort();
    if (!keys.length) return '—';
    return keys.map((k) => k + '=' + labels[k]).join(', ');
  };
})(window.M);
