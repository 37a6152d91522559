// A Workflow's state machine as an SVG graph, and with a run the way it went: the picture
// `kubectl fn graph --run` prints as DOT (knative-lite/src/workflow/graph.rs), drawn in the
// page. The same nodes, edges and colours: Tasks are rounded boxes labelled with their
// Resource, Pass dashed boxes, Choices diamonds, Waits hexagons, Succeed and Fail pills,
// Parallel a parallelogram and Map a stacked box, each followed by its join point, with
// their branches in dashed frames; edges for Next, Choice rules, Default (dashed), Catch
// (red, dashed) and Retry (a loop). With a run, states it exited are green, failed red,
// entered and not left yellow, never entered grey; the transitions it took are bold.
//
// Layout is layered, top to bottom: ranks by longest path from the start over the edges
// that are not back edges of a depth-first walk, then a few sweeps ordering each rank by
// its neighbours' positions, then each node placed under its predecessors where it fits.

import {s} from './dom.js';

const CHAR_W = 7.2;
const LINE_H = 15;
const RANK_GAP = 46;
const NODE_GAP = 28;
const PAD = 16;

/** The states a run's history says it visited, as graph.rs's `Visits::of`. */
export function visits(status) {
  const states = new Map();
  const failedAttempts = new Map();
  const taken = new Set();
  const order = {exited: 0, current: 1, failed: 2};
  const latest = new Map();
  const left = new Map();
  for (const e of status?.history || []) {
    const thread = e.thread || '';
    const k = `${thread}\u0000${e.state}`;
    switch (e.type) {
      case 'StateEntered':
        latest.set(k, 'current');
        if (left.has(thread)) {
          taken.add(`${left.get(thread)}\u0000${e.state}`);
          left.delete(thread);
        }
        break;
      case 'StateExited':
        latest.set(k, 'exited');
        left.set(thread, e.state);
        break;
      case 'StateFailed':
        latest.set(k, 'failed');
        left.set(thread, e.state);
        break;
      case 'TaskFailed':
        if (!latest.has(k)) latest.set(k, 'current');
        failedAttempts.set(e.state, (failedAttempts.get(e.state) || 0) + 1);
        break;
      default:
    }
  }
  for (const [k, v] of latest) {
    const state = k.split('\u0000')[1];
    const prev = states.get(state);
    if (prev === undefined || order[v] > order[prev]) states.set(state, v);
  }
  return {states, failedAttempts, taken};
}

/** The nodes, edges and frames of a definition (`{StartAt, States}`). */
export function build(definition, status) {
  const nodes = new Map();
  const edges = [];
  const clusters = [];
  const seen = status ? visits(status) : null;
  const ids = new Set();
  const walk = (m) => {
    for (const [name, st] of Object.entries(m?.States || {})) {
      ids.add(name);
      for (const b of st.Branches || []) walk(b);
      const inner = st.ItemProcessor || st.Iterator;
      if (inner) walk(inner);
    }
  };
  walk(definition);
  const fresh = (base) => {
    let id = base;
    while (ids.has(id)) id += '_';
    ids.add(id);
    return id;
  };
  const start = fresh('__start__');
  const end = fresh('__end__');
  const visited = (name) => !!seen?.states.has(name);
  const wasTaken = (from, to) => !!seen?.taken.has(`${from}\u0000${to}`);
  const edge = (from, to, kind, label, taken) => edges.push({from, to, kind, label, taken: !!taken});

  nodes.set(start, {id: start, shape: 'start', lines: [], cluster: null});
  nodes.set(end, {id: end, shape: 'end', lines: [], cluster: null});

  const machine = (m, exit, cluster) => {
    for (const [name, st] of Object.entries(m.States || {})) {
      const lines = [name];
      let shape = 'task';
      switch (st.Type) {
        case 'Task': lines.push(String(st.Resource || '')); break;
        case 'Pass': shape = 'pass'; break;
        case 'Choice': shape = 'choice'; break;
        case 'Wait':
          shape = 'wait';
          if (st.Seconds !== undefined) lines.push(`wait ${st.Seconds}s`);
          else if (st.SecondsPath) lines.push(`wait ${st.SecondsPath} s`);
          else if (st.Timestamp) lines.push(`until ${st.Timestamp}`);
          else if (st.TimestampPath) lines.push(`until ${st.TimestampPath}`);
          break;
        case 'Succeed': shape = 'succeed'; break;
        case 'Fail': shape = 'fail'; if (st.Error) lines.push(st.Error); break;
        case 'Parallel': shape = 'parallel'; lines.push(`${(st.Branches || []).length} branches`); break;
        case 'Map': shape = 'map'; lines.push(`for each of ${st.ItemsPath || '$'}`); break;
        default: break;
      }
      const v = seen?.states.get(name);
      const attempts = seen?.failedAttempts.get(name);
      if (v && attempts) lines.push(`${attempts} failed attempt${attempts === 1 ? '' : 's'}`);
      nodes.set(name, {id: name, shape, lines, cluster, visit: seen ? v || 'unvisited' : null});

      let from = name;
      if (st.Type === 'Parallel' || st.Type === 'Map') {
        const join = fresh(`${name} (join)`);
        nodes.set(join, {id: join, shape: 'join', lines: [], cluster});
        const inner = st.Type === 'Parallel'
          ? (st.Branches || []).map((b, i) => [`branch ${i + 1}`, b])
          : [['each item', st.ItemProcessor || st.Iterator || {}]];
        for (const [label, sub] of inner) {
          const id = `cluster${clusters.length + 1}`;
          clusters.push({id, label: `${name}: ${label}`, parent: cluster});
          machine(sub, join, id);
          if (sub.StartAt) edge(name, sub.StartAt, 'branch', null, visited(sub.StartAt));
        }
        from = join;
      }
      if (st.Next) edge(from, st.Next, 'next', null, wasTaken(name, st.Next));
      else if (st.End) edge(from, exit, 'next', null, v === 'exited');
      if (st.Type === 'Choice') {
        (st.Choices || []).forEach((c, i) => edge(name, c.Next, 'choice', `rule ${i + 1}`, wasTaken(name, c.Next)));
        if (st.Default) edge(name, st.Default, 'default', 'default', wasTaken(name, st.Default));
      }
      if (st.Type === 'Succeed') edge(name, exit, 'next', null, v === 'exited');
      if (st.Type === 'Fail') edge(name, exit, 'fail', null, !!v);
      for (const r of st.Retry || []) {
        edge(name, name, 'retry', `retry ${(r.ErrorEquals || []).join(', ')} (at most ${r.MaxAttempts ?? 3}x)`, false);
      }
      for (const c of st.Catch || []) edge(name, c.Next, 'catch', (c.ErrorEquals || []).join(', '), wasTaken(name, c.Next));
    }
  };
  edge(start, definition.StartAt, 'next', null, visited(definition.StartAt));
  machine(definition, end, null);
  // Edges to states that do not exist (a definition the controller rejected) are dropped.
  return {nodes, edges: edges.filter((e) => nodes.has(e.from) && nodes.has(e.to)), clusters, start};
}

function size(node) {
  switch (node.shape) {
    case 'start': return {w: 14, h: 14};
    case 'end': return {w: 18, h: 18};
    case 'join': return {w: 8, h: 8};
    default: {
      const text = Math.max(...node.lines.map((l) => l.length)) * CHAR_W;
      const lines = node.lines.length * LINE_H;
      if (node.shape === 'choice') return {w: text * 1.5 + 36, h: lines * 1.8 + 18};
      if (node.shape === 'wait' || node.shape === 'parallel') return {w: text + 52, h: lines + 20};
      return {w: text + 28, h: lines + 20};
    }
  }
}

/** Positions of every node: ranks, order within ranks, coordinates. */
export function layout(graph) {
  const {nodes, edges, start} = graph;
  const out = new Map([...nodes.keys()].map((id) => [id, []]));
  for (const e of edges) if (e.from !== e.to) out.get(e.from).push(e);
  // Depth-first from the start: edges to a node on the stack are back edges (loops).
  const state = new Map();
  const post = [];
  const back = new Set();
  const visit = (id) => {
    state.set(id, 'open');
    for (const e of out.get(id)) {
      const st = state.get(e.to);
      if (st === 'open') back.add(e);
      else if (!st) visit(e.to);
    }
    state.set(id, 'done');
    post.push(id);
  };
  visit(start);
  for (const id of nodes.keys()) if (!state.has(id)) visit(id);
  const rank = new Map([...nodes.keys()].map((id) => [id, 0]));
  for (const id of post.slice().reverse()) {
    for (const e of out.get(id)) if (!back.has(e)) rank.set(e.to, Math.max(rank.get(e.to), rank.get(id) + 1));
  }
  const ranks = [];
  for (const id of post.slice().reverse()) {
    const r = rank.get(id);
    (ranks[r] = ranks[r] || []).push(id);
  }
  const forward = edges.filter((e) => e.from !== e.to && !back.has(e));
  const preds = new Map([...nodes.keys()].map((id) => [id, []]));
  const succs = new Map([...nodes.keys()].map((id) => [id, []]));
  for (const e of forward) {
    preds.get(e.to).push(e.from);
    succs.get(e.from).push(e.to);
  }
  // Barycentre sweeps: down by predecessors, up by successors.
  const pos = new Map();
  const index = () => ranks.forEach((r) => r.forEach((id, i) => pos.set(id, i)));
  index();
  const mean = (ids) => (ids.length ? ids.reduce((a, id) => a + pos.get(id), 0) / ids.length : null);
  for (let sweep = 0; sweep < 4; sweep++) {
    const order = sweep % 2 === 0 ? ranks.slice(1) : ranks.slice(0, -1).reverse();
    for (const r of order) {
      const key = new Map(r.map((id) => [id, mean(sweep % 2 === 0 ? preds.get(id) : succs.get(id)) ?? pos.get(id)]));
      r.sort((a, b) => key.get(a) - key.get(b));
      r.forEach((id, i) => pos.set(id, i));
    }
  }
  // Coordinates: each rank's row; nodes under their predecessors' centre, without overlap.
  const box = new Map([...nodes.values()].map((n) => [n.id, size(n)]));
  const place = new Map();
  let y = PAD + 4;
  for (const r of ranks) {
    const rowH = Math.max(...r.map((id) => box.get(id).h));
    let right = -Infinity;
    for (const id of r) {
      const {w, h} = box.get(id);
      const ps = preds.get(id).filter((p) => place.has(p));
      const want = ps.length ? ps.reduce((a, p) => a + place.get(p).x, 0) / ps.length : 0;
      const x = Math.max(want, right + NODE_GAP + w / 2);
      place.set(id, {x, y: y + rowH / 2, w, h});
      right = x + w / 2;
    }
    y += rowH + RANK_GAP;
  }
  // Shift everything right of the left margin; loops go round the right-hand side.
  const minX = Math.min(...[...place.values()].map((p) => p.x - p.w / 2));
  for (const p of place.values()) p.x += PAD - minX;
  const width = Math.max(...[...place.values()].map((p) => p.x + p.w / 2)) + PAD + 90;
  return {place, back, width, height: y - RANK_GAP + PAD};
}

function shape(node, p) {
  const {x, y, w, h} = p;
  const l = x - w / 2;
  const t = y - h / 2;
  switch (node.shape) {
    case 'start': return [s('circle', {cx: x, cy: y, r: 7, class: 'start'})];
    case 'end': return [s('circle', {cx: x, cy: y, r: 9, class: 'end-ring'}), s('circle', {cx: x, cy: y, r: 5.5, class: 'end'})];
    case 'join': return [s('circle', {cx: x, cy: y, r: 4, class: 'join'})];
    case 'choice': return [s('polygon', {points: `${x},${t} ${l + w},${y} ${x},${t + h} ${l},${y}`})];
    case 'wait': return [s('polygon', {points: `${l + 14},${t} ${l + w - 14},${t} ${l + w},${y} ${l + w - 14},${t + h} ${l + 14},${t + h} ${l},${y}`})];
    case 'parallel': return [s('polygon', {points: `${l + 14},${t} ${l + w},${t} ${l + w - 14},${t + h} ${l},${t + h}`})];
    case 'map': return [
      s('rect', {x: l + 6, y: t - 6, width: w, height: h, rx: 3, class: 'behind'}),
      s('rect', {x: l, y: t, width: w, height: h, rx: 3}),
    ];
    case 'succeed': case 'fail': return [
      s('rect', {x: l - 4, y: t - 4, width: w + 8, height: h + 8, rx: (h + 8) / 2, class: 'outer'}),
      s('rect', {x: l, y: t, width: w, height: h, rx: h / 2}),
    ];
    case 'pass': return [s('rect', {x: l, y: t, width: w, height: h, rx: 2})];
    default: return [s('rect', {x: l, y: t, width: w, height: h, rx: 10})];
  }
}

function edgePath(e, from, to, isBack, loopX) {
  if (e.from === e.to) {
    const x = from.x + from.w / 2;
    return {d: `M${x},${from.y - 6}C${x + 46},${from.y - 26} ${x + 46},${from.y + 26} ${x},${from.y + 6}`, lx: x + 40, ly: from.y, anchor: 'start'};
  }
  if (isBack) {
    // Up the right-hand side, clear of the nodes between.
    const sx = from.x + from.w / 2;
    const tx = to.x + to.w / 2;
    return {d: `M${sx},${from.y}C${loopX},${from.y} ${loopX},${to.y} ${tx},${to.y}`, lx: loopX - 18, ly: (from.y + to.y) / 2, anchor: 'end'};
  }
  const sx = from.x;
  const sy = from.y + from.h / 2;
  const tx = to.x;
  const ty = to.y - to.h / 2 - 2;
  const dy = Math.max(20, (ty - sy) / 2);
  return {d: `M${sx},${sy}C${sx},${sy + dy} ${tx},${ty - dy} ${tx},${ty}`, lx: (sx + tx) / 2 + 4, ly: (sy + ty) / 2 + 4, anchor: 'start'};
}

/** The SVG of `definition`, coloured by `status` (a WorkflowRun's) when given. */
export function render(definition, status) {
  const graph = build(definition, status);
  const laid = layout(graph);
  const {place, back, height} = laid;
  let {width} = laid;
  // Room for the labels of Retry loops, which sit right of their state.
  for (const e of graph.edges.filter((x) => x.from === x.to && x.label)) {
    const p = place.get(e.from);
    width = Math.max(width, p.x + p.w / 2 + 40 + e.label.length * 6.2 + PAD);
  }
  const svg = s('svg', {
    class: ['workflow-graph', status ? 'with-run' : null],
    viewBox: `0 0 ${Math.ceil(width)} ${Math.ceil(height)}`,
    width: Math.ceil(width), height: Math.ceil(height), role: 'img', 'aria-label': 'state machine',
  });
  const defs = s('defs');
  for (const kind of ['plain', 'catch', 'taken']) {
    // In the graph's units, so that a bold (taken) edge does not get a bigger head.
    defs.appendChild(s('marker', {
      id: `arrow-${kind}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 9, markerHeight: 9,
      markerUnits: 'userSpaceOnUse', orient: 'auto-start-reverse',
    }, s('path', {d: 'M0,0L10,5L0,10z', class: `arrowhead ${kind}`})));
  }
  svg.appendChild(defs);
  // Frames of Parallel branches and Map processors, innermost drawn last.
  const depth = (c) => (c.parent ? 1 + depth(graph.clusters.find((p) => p.id === c.parent)) : 0);
  const members = (id) => {
    const inner = graph.clusters.filter((c) => c.parent === id).flatMap((c) => members(c.id));
    return [...graph.nodes.values()].filter((n) => n.cluster === id).map((n) => place.get(n.id)).concat(inner);
  };
  for (const c of graph.clusters.slice().sort((a, b) => depth(a) - depth(b))) {
    const ps = members(c.id);
    if (!ps.length) continue;
    const pad = 12 - depth(c) * 3;
    const l = Math.min(...ps.map((p) => p.x - p.w / 2)) - pad;
    const r = Math.max(...ps.map((p) => p.x + p.w / 2)) + pad;
    const t = Math.min(...ps.map((p) => p.y - p.h / 2)) - pad - 14;
    const b = Math.max(...ps.map((p) => p.y + p.h / 2)) + pad;
    svg.appendChild(s('g', {class: 'cluster'},
      s('rect', {x: l, y: t, width: r - l, height: b - t, rx: 8}),
      s('text', {x: l + 6, y: t + 12}, c.label)));
  }
  const loopX = width - 30;
  for (const e of graph.edges) {
    const p = edgePath(e, place.get(e.from), place.get(e.to), back.has(e), loopX);
    const kind = e.taken ? 'taken' : e.kind === 'catch' || e.kind === 'fail' ? 'catch' : 'plain';
    const g = s('g', {class: ['edge', e.kind, e.taken ? 'taken' : null], 'data-from': e.from, 'data-to': e.to},
      s('path', {d: p.d, 'marker-end': `url(#arrow-${kind})`}));
    if (e.label) g.appendChild(s('text', {x: p.lx, y: p.ly, 'text-anchor': p.anchor}, e.label));
    svg.appendChild(g);
  }
  for (const n of graph.nodes.values()) {
    const p = place.get(n.id);
    const g = s('g', {class: ['state', n.shape, n.visit], 'data-state': n.id}, ...shape(n, p));
    const top = p.y - ((n.lines.length - 1) * LINE_H) / 2 + 4;
    n.lines.forEach((line, i) => {
      g.appendChild(s('text', {x: p.x, y: top + i * LINE_H, 'text-anchor': 'middle', class: i ? 'sub' : 'name'}, line));
    });
    if (n.shape === 'start' || n.shape === 'end') g.appendChild(s('title', null, n.shape === 'start' ? 'start' : 'end'));
    svg.appendChild(g);
  }
  return svg;
}
