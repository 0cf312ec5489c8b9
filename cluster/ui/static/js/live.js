// Keeping the page current: the server's event stream (GET /v1/events,
// Server-Sent Events) read with fetch, since EventSource cannot send an
// Authorization header; re-reading every 2 s from a server without it.
//
// Events only say that something changed: on each the page re-reads what
// it shows (App.changed, at most about once a second), so a lost event
// costs nothing but a later refresh. A dropped stream is resumed with
// Last-Event-ID after a back-off; a "reset" event (the server lost events
// for this client) makes the page re-read everything.
'use strict';

(function (M) {
  const POLL_MS = 2000;
  const BACKOFF_MIN_MS = 1000;
  const BACKOFF_MAX_MS = 30000;
  // The server sends a keep-alive every 15 s: a stream silent for longer
  // than IDLE_MS is taken for dead (a half-open connection) and resumed.
  const IDLE_MS = 45000;

  class Live {
    // onChange(event) is called for every event (null: re-read
    // everything); onMode(mode, text) when the way of staying current
    // changes; onAuth(err) when the server refuses the token.
    constructor(onChange, onMode, onAuth) {
      this.onChange = onChange;
      this.onMode = onMode;
      this.onAuth = onAuth;
      this.lastId = '';
      this.gen = 0;
      this.abort = null;
      this.timer = null;
      this.retryMs = 0; // the stream's own "retry:", if it sent one
    }

    // start (re)starts: after sign-in, or once a new token is given.
    start() {
      this.stop();
      const gen = ++this.gen;
      this.loop(gen);
    }

    stop() {
      this.gen++;
      if (this.abort) this.abort.abort();
      this.abort = null;
      clearInterval(this.timer);
      this.timer = null;
    }

    mode(m, text) { this.onMode(m, text); }

    async loop(gen) {
      let backoff = BACKOFF_MIN_MS;
      while (gen === this.gen) {
        const headers = M.headers({Accept: 'text/event-stream'});
        if (this.lastId) headers['Last-Event-ID'] = this.lastId;
        this.abort = new AbortController();
        let resp = null;
        try {
          resp = await fetch('/v1/events', {headers, cache: 'no-store', credentials: 'omit', signal: this.abort.signal});
        } catch (e) {
          resp = null;
        }
        if (gen !== this.gen) return;
        if (resp && resp.status === 404) {
          this.poll(gen);
          return;
        }
        if (resp && (resp.status === 401 || resp.status === 403)) {
          let msg = 'the server refused the token';
          try { msg = (await resp.json()).error || msg; } catch (e) { /* not JSON */ }
          this.mode('off', 'not signed in');
          this.onAuth(new M.APIError(resp.status, '', msg));
          return;
        }
        const type = resp ? resp.headers.get('Content-Type') || '' : '';
        if (resp && resp.ok && type.startsWith('text/event-stream') && resp.body) {
          this.mode('live', 'live: event stream');
          backoff = BACKOFF_MIN_MS;
          // Whatever happened while there was no stream: read it again.
          this.onChange(null);
          try {
            await this.read(resp.body, gen);
          } catch (e) {
            // A dropped connection; resumed below.
          }
          if (gen !== this.gen) return;
        } else if (resp) {
          resp.body && resp.body.cancel().catch(() => {});
        }
        const wait = Math.max(this.retryMs, backoff);
        this.mode('reconnecting', `event stream lost: reconnecting in ${Math.round(wait / 1000)} s`);
        await new Promise((r) => setTimeout(r, wait));
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      }
    }

    // poll is for servers without the event stream.
    poll(gen) {
      if (gen !== this.gen) return;
      this.mode('polling', `polling every ${POLL_MS / 1000} s (this server has no event stream)`);
      this.timer = setInterval(() => this.onChange(null), POLL_MS);
    }

    // read parses the stream (the WHATWG rules for text/event-stream:
    // lines end with CRLF, LF or CR; a blank line dispatches; lines
    // starting with a colon are comments, the server's keep-alives).
    async read(body, gen) {
      const reader = body.pipeThrough(new TextDecoderStream()).getReader();
      let idle = null;
      const watch = () => {
        clearTimeout(idle);
        idle = setTimeout(() => { if (this.abort) this.abort.abort(); }, IDLE_MS);
      };
      watch();
      try {
        await this.parse(reader, gen, watch);
      } finally {
        clearTimeout(idle);
      }
    }

    // parse reads lines and dispatches events until the stream ends;
    // watch is called on every chunk read.
    async parse(reader, gen, watch) {
      let buf = '';
      let ev = {type: '', data: [], id: null};
      for (;;) {
        const {value, done} = await reader.read();
        watch();
        if (done || gen !== this.gen) {
          reader.cancel().catch(() => {});
          return;
        }
        buf += value;
        for (;;) {
          const i = buf.search(/[\r\n]/);
          if (i < 0) break;
          if (buf[i] === '\r' && i === buf.length - 1) break; // a CR whose LF may come next
          const line = buf.slice(0, i);
          buf = buf.slice(i + (buf[i] === '\r' && buf[i + 1] === '\n' ? 2 : 1));
          if (line === '') {
            this.dispatch(ev);
            ev = {type: '', data: [], id: null};
            continue;
          }
          if (line[0] === ':') continue;
          const c = line.indexOf(':');
          const field = c < 0 ? line : line.slice(0, c);
          let v = c < 0 ? '' : line.slice(c + 1);
          if (v[0] === ' ') v = v.slice(1);
          switch (field) {
            case 'event': ev.type = v; break;
            case 'data': ev.data.push(v); break;
            case 'id': if (!v.includes('\0')) ev.id = v; break;
            case 'retry': if (/^\d+$/.test(v)) this.retryMs = Number(v); break;
          }
        }
      }
    }

    dispatch(ev) {
      if (ev.id !== null) this.lastId = ev.id;
      if (!ev.data.length) return;
      let data = null;
      try {
        data = JSON.parse(ev.data.join('\n'));
      } catch (e) {
        data = {};
      }
      const kind = ev.type || data.kind || 'message';
      if (kind === 'reset') {
        this.onChange(null);
        return;
      }
      this.onChange(Object.assign({kind}, data));
    }
  }
  M.Live = Live;
})(window.M);
