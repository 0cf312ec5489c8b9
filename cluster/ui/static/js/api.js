// The operator's token and calls to the HTTP API (docs/api.md). The token
// is kept in this tab's sessionStorage and sent only as a Bearer token;
// the console sets and reads no cookie.
'use strict';

(function (M) {
  const TOKEN_KEY = 'meteor.token';

  M.token = () => sessionStorage.getItem(TOKEN_KEY) || '';
  M.setToken = (t) => t ? sessionStorage.setItem(TOKEN_KEY, t) : sessionStorage.removeItem(TOKEN_KEY);

  // takeTokenFromFragment keeps a token given in the address's fragment
  // (#token=…, which browsers never send to a server) and removes it from
  // the address bar and the history entry. Anything after an & is the
  // route to open.
  M.takeTokenFromFragment = function () {
    const m = /^#token=([^&]*)(?:&(.*))?$/.exec(location.hash);
    if (!m) return false;
    const tok = decodeURIComponent(m[1]).trim();
    if (tok) M.setToken(tok);
    const rest = m[2] ? '#' + m[2] : '#/';
    history.replaceState(null, '', location.pathname + location.search + rest);
    return true;
  };

  // APIError is an error answer of the API: its HTTP status, code and the
  // server's message.
  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
    get auth() { return this.status === 401 || this.status === 403; }
  }
  M.APIError = APIError;

  M.headers = function (extra) {
    const h = Object.assign({Accept: 'application/json'}, extra || {});
    const tok = M.token();
    if (tok) h.Authorization = 'Bearer ' + tok;
    return h;
  };

  // call sends one request and returns the decoded JSON answer, or throws
  // an APIError with the server's message.
  M.call = async function (method, path, body) {
    const init = {method, headers: M.headers(), cache: 'no-store', credentials: 'omit', redirect: 'error'};
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new APIError(0, 'network', 'cannot reach the server: ' + e.message);
    }
    const text = await resp.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (e) {
        throw new APIError(resp.status, 'bad_answer', `${method} ${path}: ${resp.status}, not JSON: ${text.slice(0, 200)}`);
      }
    }
    if (!resp.ok) {
      const msg = data && data.error ? data.error : `${method} ${path}: ${resp.status} ${resp.statusText}`;
      throw new APIError(resp.status, data && data.code || '', msg);
    }
    return data;
  };

  M.get = (path) => M.call('GET', path);
  M.post = (path, body) => M.call('POST', path, body);

  // q encodes query parameters, leaving out empty ones.
  M.q = function (params) {
    const u = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
      if (v !== '' && v !== null && v !== undefined) u.set(k, v);
    }
    const s = u.toString();
    return s ? '?' + s : '';
  };
  M.enc = encodeURIComponent;
})(window.M);
