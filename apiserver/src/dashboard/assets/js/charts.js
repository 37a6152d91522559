// Time-series charts drawn as inline SVG: a line over an area, a few gridlines, the latest
// value; scaled to their box by the viewBox, so they need no layout code.

import {h, s, replace, cpu, bytes} from './dom.js';
import {usage, sampler, SAMPLE_EVERY_MS, WINDOW_MS} from './metrics.js';

const W = 560;
const H = 170;
const M = {left: 56, right: 14, top: 30, bottom: 24};

/** Round tick values from 0 up to at least `max`. */
function ticks(max) {
  if (!(max > 0)) return [0, 1];
  const raw = max / 4;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((st) => st >= raw);
  const out = [];
  for (let v = 0; v < max + step * 0.999; v += step) out.push(v);
  return out;
}

/** Memory ticks on binary boundaries, so that labels read `256Mi`, not `268.4M`. */
function byteTicks(max) {
  if (!(max > 0)) return [0, 1024];
  let unit = 1;
  while (unit * 1024 <= max / 2) unit *= 1024;
  return ticks(max / unit).map((v) => v * unit);
}

function clock(ms) {
  const d = new Date(ms);
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

/**
 * A line chart of `points` ([[ms, value]]): `format` prints values, `byteScale` picks
 * binary ticks.
 */
export function lineChart({title, points, format, byteScale = false, cls = 'cpu', now = Date.now()}) {
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, class: ['chart', cls], role: 'img', 'aria-label': title});
  const x0 = M.left;
  const x1 = W - M.right;
  const y0 = H - M.bottom;
  const y1 = M.top;
  const first = points.length ? points[0][0] : now;
  // At least five minutes across, at most the window: a page open for a minute still shows
  // its first samples as a line, not a dot at the right edge.
  const start = Math.max(now - WINDOW_MS, Math.min(first, now - 5 * 60 * 1000));
  const span = Math.max(1, now - start);
  const max = Math.max(0, ...points.map(([, v]) => v).filter(Number.isFinite));
  const ys = byteScale ? byteTicks(max * 1.1) : ticks(max * 1.1);
  const top = ys[ys.length - 1] || 1;
  const x = (t) => x0 + ((t - start) / span) * (x1 - x0);
  const y = (v) => y0 - (v / top) * (y0 - y1);

  svg.appendChild(s('text', {x: 4, y: 16, class: 'chart-title'}, title));
  const last = points.length ? points[points.length - 1][1] : NaN;
  svg.appendChild(s('text', {x: W - 4, y: 16, class: 'chart-value', 'text-anchor': 'end'},
    Number.isFinite(last) ? format(last) : '–'));
  for (const v of ys) {
    svg.appendChild(s('line', {x1: x0, x2: x1, y1: y(v), y2: y(v), class: 'grid'}));
    svg.appendChild(s('text', {x: x0 - 6, y: y(v) + 4, class: 'axis', 'text-anchor': 'end'}, format(v)));
  }
  const xTicks = 4;
  for (let i = 0; i <= xTicks; i++) {
    const t = start + (span * i) / xTicks;
    svg.appendChild(s('text', {
      x: x(t), y: H - 6, class: 'axis', 'text-anchor': i === 0 ? 'start' : i === xTicks ? 'end' : 'middle',
    }, clock(t)));
  }
  const shown = points.filter(([t, v]) => t >= start && Number.isFinite(v));
  if (shown.length >= 2) {
    const line = shown.map(([t, v], i) => `${i ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join('');
    const area = `${line}L${x(shown[shown.length - 1][0]).toFixed(1)},${y0}L${x(shown[0][0]).toFixed(1)},${y0}Z`;
    svg.appendChild(s('path', {d: area, class: 'area'}));
    svg.appendChild(s('path', {d: line, class: 'line'}));
  } else {
    for (const [t, v] of shown) svg.appendChild(s('circle', {cx: x(t), cy: y(v), r: 3, class: 'dot'}));
    svg.appendChild(s('text', {x: (x0 + x1) / 2, y: (y0 + y1) / 2, class: 'chart-empty', 'text-anchor': 'middle'},
      'collecting samples…'));
  }
  return svg;
}

const SOURCE = {
  prometheus: 'From Prometheus, the last 30 minutes.',
  'metrics-api': `From the metrics API, sampled every ${SAMPLE_EVERY_MS / 1000} s since this page opened (Prometheus is not running or not reachable).`,
};

/**
 * CPU and memory charts of `target` (see metrics.js `usage`), redrawn every sampling period
 * and at each sample of the metrics API, until `signal` aborts.
 */
export function usagePanel(target, signal) {
  const charts = h('div', {class: 'charts'});
  const caption = h('p', {class: 'caption'});
  const panel = h('section', {class: 'panel usage', 'data-source': 'pending'},
    h('h2', null, 'CPU and memory'), charts, caption);
  let drawing = false;
  const draw = async () => {
    if (drawing || signal.aborted) return;
    drawing = true;
    try {
      const u = await usage(typeof target === 'function' ? target() : target);
      if (signal.aborted) return;
      panel.dataset.source = u.source;
      replace(charts,
        lineChart({title: 'CPU (cores)', points: u.cpu, format: cpu, cls: 'cpu'}),
        lineChart({title: 'Memory (working set)', points: u.memory, format: bytes, byteScale: true, cls: 'mem'}));
      replace(caption, SOURCE[u.source]);
    } finally {
      drawing = false;
    }
  };
  draw();
  // Prometheus is asked again every period; the metrics API's samples redraw as they come.
  const timer = setInterval(() => panel.dataset.source !== 'metrics-api' && draw(), SAMPLE_EVERY_MS);
  const off = sampler.subscribe(() => panel.dataset.source !== 'prometheus' && draw());
  signal.addEventListener('abort', () => { clearInterval(timer); off(); }, {once: true});
  // For targets that change (the pods of a workload): the caller redraws when they do.
  panel.redraw = draw;
  return panel;
}
