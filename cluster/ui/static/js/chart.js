// The convergence chart of a rollout: its sample events (the revision's
// counts over time, as the leader recorded them) drawn as step lines of
// targeted, acknowledged, converged and failed devices, with the
// rollout's decisions marked on the time axis. Plain SVG.
'use strict';

(function (M) {
  const W = 760, H = 240;
  const PAD = {left: 48, right: 16, top: 12, bottom: 28};
  const SERIES = [
    {key: 'targeted', label: 'targeted'},
    {key: 'acknowledged', label: 'acknowledged'},
    {key: 'converged', label: 'converged'},
    {key: 'failed', label: 'failed'},
  ];

  // chart draws points [{t: ms, counts: {targeted, …}}, …] (oldest
  // first) and marks [{t: ms, kind, text}].
  M.chart = function (points, marks) {
    const t0 = points[0].t;
    const t1 = Math.max(points[points.length - 1].t, t0 + 1000);
    let ymax = 1;
    for (const p of points) for (const s of SERIES) ymax = Math.max(ymax, p.counts[s.key] || 0);
    const x = (t) => PAD.left + (W - PAD.left - PAD.right) * (t - t0) / (t1 - t0);
    const y = (v) => H - PAD.bottom - (H - PAD.top - PAD.bottom) * v / ymax;

    const svg = M.svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img',
      'aria-label': 'devices targeted, acknowledged, converged and failed over time'});
    // Axes and grid.
    for (const v of [0, Math.round(ymax / 2), ymax]) {
      svg.append(M.svg('line', {x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: 'grid'}));
      svg.append(M.svg('text', {x: PAD.left - 6, y: y(v) + 4, class: 'axis', 'text-anchor': 'end'}, String(v)));
    }
    const fmt = (t) => new Date(t).toLocaleTimeString();
    svg.append(M.svg('text', {x: PAD.left, y: H - 8, class: 'axis'}, fmt(t0)));
    svg.append(M.svg('text', {x: W - PAD.right, y: H - 8, class: 'axis', 'text-anchor': 'end'}, fmt(t1)));
    for (const m of marks || []) {
      if (m.t < t0 || m.t > t1) continue;
      svg.append(M.svg('line', {x1: x(m.t), x2: x(m.t), y1: PAD.top, y2: H - PAD.bottom, class: 'mark k-' + m.kind},
        M.svg('title', null, fmt(m.t) + ' ' + m.kind + (m.text ? ': ' + m.text : ''))));
    }
    // One step line per series: a count holds until the next sample.
    for (const s of SERIES) {
      let d = '';
      points.forEach((p, i) => {
        const v = y(p.counts[s.key] || 0);
        d += i === 0 ? `M${x(p.t)},${v}` : `H${x(p.t)}V${v}`;
      });
      svg.append(M.svg('path', {d, class: 'line l-' + s.key},
        M.svg('title', null, s.label)));
    }
    const legend = M.el('p', {class: 'legend'}, SERIES.map((s) => {
      const last = points[points.length - 1].counts[s.key] || 0;
      return M.el('span', {class: 'key l-' + s.key}, `${s.label} ${last}`);
    }));
    return M.el('div', {class: 'chartbox'}, svg, legend);
  };
})(window.M);
