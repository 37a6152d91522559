// Building the page from data without innerHTML: every value from the API becomes a text
// node, so nothing a user put in a name, label or log line can run as markup.

const SVG_NS = 'http://www.w3.org/2000/svg';

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

function attributes(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    else if (k === 'style') Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

/** An HTML element: `h('a', {href: '#/pods'}, 'Pods')`. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  attributes(el, attrs);
  append(el, children);
  return el;
}

/** An SVG element, attributes as given. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  attributes(el, attrs);
  append(el, children);
  return el;
}

/** Replaces `el`'s children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** kubectl's age column (`HumanDuration`): 45s, 12m, 3h4m, 5d, 2y. */
export function age(timestamp, now = Date.now()) {
  if (!timestamp) return '<unknown>';
  const secs = Math.max(0, Math.floor((now - Date.parse(timestamp)) / 1000));
  if (secs < 120) return `${secs}s`;
  const mins = Math.floor(secs / 60);
  if (mins < 10) return `${mins}m${secs % 60 ? `${secs % 60}s` : ''}`;
  if (mins < 180) return `${mins}m`;
  const hours = Math.floor(mins / 60);
  if (hours < 8) return `${hours}h${mins % 60 ? `${mins % 60}m` : ''}`;
  if (hours < 48) return `${hours}h`;
  const days = Math.floor(hours / 24);
  if (days < 8) return `${days}d${hours % 24 ? `${hours % 24}h` : ''}`;
  if (days < 365 * 2) return `${days}d`;
  return `${Math.floor(days / 365)}y`;
}

const SUFFIX = {
  n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};

/** A resource.Quantity as a number (`250m` → 0.25, `1Gi` → 1073741824); NaN if malformed. */
export function quantity(q) {
  if (q === undefined || q === null) return NaN;
  const m = /^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$/.exec(String(q).trim());
  if (!m || !(m[2] in SUFFIX)) return NaN;
  return parseFloat(m[1]) * SUFFIX[m[2]];
}

/** CPU cores as kubectl top prints them: millicores below 10 cores. */
export function cpu(cores) {
  if (!Number.isFinite(cores)) return '–';
  const milli = cores * 1000;
  if (milli > 0 && milli < 10 && !Number.isInteger(milli)) return `${parseFloat(milli.toFixed(1))}m`;
  if (cores < 10) return `${Math.round(milli)}m`;
  return cores.toFixed(1);
}

/** Bytes in binary units, as kubectl top prints memory (`Mi`) when large. */
export function bytes(n) {
  if (!Number.isFinite(n)) return '–';
  const units = ['', 'Ki', 'Mi', 'Gi', 'Ti'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)}${units[i]}`;
}

/** A coloured label; `kind` is one of ok, warn, bad, idle, info. */
export function badge(text, kind = 'idle') {
  return h('span', {class: ['badge', kind]}, text);
}

/** The badge kind of a pod phase or a condition's state. */
export function phaseKind(phase) {
  switch (phase) {
    case 'Running': case 'Succeeded': case 'Ready': case 'Active': case 'True': case 'Complete':
      return 'ok';
    case 'Pending': case 'Terminating': case 'Unknown': case 'ContainerCreating':
      return 'warn';
    case 'Failed': case 'False': case 'NotReady': case 'CrashLoopBackOff': case 'Error':
    case 'TimedOut': case 'Aborted':
      return 'bad';
    default:
      return 'idle';
  }
}

/** A condition of `obj.status.conditions` by type. */
export function condition(obj, type) {
  return (obj?.status?.conditions || []).find((c) => c.type === type);
}

/** `ns/name` of an object (its name alone when cluster-scoped). */
export function key(obj) {
  const m = obj.metadata || {};
  return m.namespace ? `${m.namespace}/${m.name}` : m.name;
}

/** A hash link into the dashboard. */
export function link(path, text) {
  return h('a', {href: `#${path}`}, text);
}

/** A value and its label as the summary boxes show them. */
export function field(label, ...value) {
  return h('div', {class: 'field'}, h('dt', null, label), h('dd', null, ...value));
}

/** An error from the API as a message box. */
export function errorBox(err) {
  return h('div', {class: 'error', role: 'alert'}, err?.message || String(err));
}

/** A small JSON to YAML printer for the YAML tab: block style, strings quoted when needed. */
export function yaml(value, indent = '') {
  const empty = (v) => v && typeof v === 'object' && (Array.isArray(v) ? !v.length : !Object.keys(v).length);
  const nested = (v) => v && typeof v === 'object' && !empty(v);
  const scalar = (v) => {
    if (Array.isArray(v)) return '[]';
    if (v && typeof v === 'object') return '{}';
    if (typeof v !== 'string') return String(v);
    const plain = v !== '' && !/^\s|\s$|\n|: | #|^[-?:,[\]{}#&*!|>'"%@`]|^(true|false|null|yes|no|on|off|~)$|^[0-9.+-]/i.test(v);
    return plain ? v : JSON.stringify(v);
  };
  if (Array.isArray(value)) {
    return value.map((v) => {
      if (Array.isArray(v) && v.length) return `${indent}-\n${yaml(v, `${indent}  `)}`;
      if (nested(v)) return `${indent}- ${yaml(v, `${indent}  `).slice(indent.length + 2)}`;
      return `${indent}- ${scalar(v)}`;
    }).join('\n');
  }
  if (nested(value)) {
    return Object.entries(value).map(([k, v]) => {
      if (!nested(v)) return `${indent}${scalar(k)}: ${scalar(v)}`;
      return `${indent}${scalar(k)}:\n${yaml(v, Array.isArray(v) ? indent : `${indent}  `)}`;
    }).join('\n');
  }
  return `${indent}${scalar(value)}`;
}
