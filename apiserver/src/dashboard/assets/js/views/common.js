// What every page is made of: live tables fed by informers, an object's summary, conditions,
// events and YAML, and the namespace the lists are narrowed to.

import {Informer, objectInformer, collection} from '../api.js';
import {h, replace, age, badge, phaseKind, errorBox, link, key, yaml, field} from '../dom.js';
import {usagePanel} from '../charts.js';

const NS_KEY = 'minik8s-dashboard-namespace';

/** The namespace lists show (empty: all of them). */
export function namespace() {
  return sessionStorage.getItem(NS_KEY) || '';
}

export function setNamespace(ns) {
  if (ns) sessionStorage.setItem(NS_KEY, ns);
  else sessionStorage.removeItem(NS_KEY);
}

let contentShown = false;

/**
 * Marks the first time a page shows data from the API (`dashboard:content` in the
 * Performance timeline): what "first load" means for the dashboard's figures.
 */
export function contentReady() {
  if (contentShown) return;
  contentShown = true;
  performance.mark('dashboard:content');
}

/** The page's title row. */
export function pageHead(title, ...extra) {
  return h('header', {class: 'page-head'}, h('h1', null, title), ...extra);
}

/** Whether an informer's watch is live, shown beside a table's title. */
function liveState(inf) {
  if (inf.state === 'error') return h('span', {class: 'live error', title: inf.error?.message}, 'error');
  if (inf.state === 'live') return h('span', {class: 'live on', title: 'updated by a watch'}, 'live');
  return h('span', {class: 'live'}, 'syncing');
}

/**
 * A table of `informer`'s items, redrawn on every change. `columns` are `[header, cell]`
 * with `cell(obj)` a string or node; `href(obj)` links the first column.
 */
export function liveTable({title, informer, columns, href, empty = 'None.', filter, order, id}) {
  const count = h('span', {class: 'count'});
  const state = h('span');
  const body = h('div', {class: 'table-wrap'});
  const panel = h('section', {class: 'panel', id}, h('h2', null, title, ' ', count, ' ', state), body);
  informer.subscribe((inf) => {
    replace(state, liveState(inf));
    if (!inf.synced) {
      if (inf.error) replace(body, errorBox(inf.error));
      return;
    }
    let items = filter ? inf.list().filter(filter) : inf.list();
    if (order) items = order(items);
    replace(count, String(items.length));
    if (!items.length) {
      replace(body, h('p', {class: 'empty'}, empty));
    } else {
      const rows = items.map((o) => h('tr', {'data-key': key(o)}, columns.map(([, cell], i) => {
        const v = cell(o);
        return h('td', null, i === 0 && href ? link(href(o), v) : v);
      })));
      replace(body, h('table', null,
        h('thead', null, h('tr', null, columns.map(([name]) => h('th', null, name)))),
        h('tbody', null, rows)));
    }
    contentReady();
  });
  return panel;
}

/** An informer over `resource` in the chosen namespace (or all), started with `signal`. */
export function watchList(groupVersion, resource, signal, query = {}, ns = namespace()) {
  return new Informer(collection(groupVersion, resource, ns), query).start(signal);
}

/**
 * A detail page: watches the object and redraws `render(obj)` (nodes) on every change; the
 * sections `attach(obj)` returns once, which hold their own watches (pods, events, logs,
 * charts), stay below it. Says so when the object is deleted or cannot be read.
 */
export function detailPage(root, signal, {groupVersion, resource, ns, name, title, render, attach}) {
  const head = pageHead(title, h('span', {class: 'sub'}, ns ? `${ns}/${name}` : name));
  const top = h('div', {class: 'detail'});
  const below = h('div', {class: 'detail'});
  replace(root, head, top, below);
  const inf = objectInformer(collection(groupVersion, resource, ns), name).start(signal);
  let attached = false;
  const draw = () => {
    const obj = inf.items.values().next().value;
    if (!inf.synced) {
      if (inf.error) replace(top, errorBox(inf.error));
      return;
    }
    if (!obj) {
      replace(top, h('div', {class: 'error', 'data-gone': ''}, attached ? `${name} was deleted.` : `${name} not found.`));
      return;
    }
    // A folded section the user opened stays open across redraws.
    const open = [...top.querySelectorAll('details')].map((d) => d.open);
    replace(top, render(obj));
    top.querySelectorAll('details').forEach((d, i) => { d.open = d.open || !!open[i]; });
    if (!attached && attach) replace(below, attach(obj));
    attached = true;
    contentReady();
  };
  inf.subscribe(draw);
  // For what `render` fetched on the side (a run's Workflow): draw again with it.
  return {redraw: () => inf.synced && draw()};
}

/** Name, namespace, age, labels, annotations and owners. */
export function metadataPanel(obj, ...fields) {
  const m = obj.metadata || {};
  const chips = (map) => Object.entries(map || {}).map(([k, v]) => h('span', {class: 'chip'}, v === '' ? k : `${k}=${v}`));
  const owners = (m.ownerReferences || []).map((o) => {
    const path = ownerPath(o, m.namespace);
    return h('span', {class: 'chip'}, `${o.kind} `, path ? link(path, o.name) : o.name);
  });
  return h('section', {class: 'panel'}, h('h2', null, 'Summary'), h('dl', {class: 'fields'},
    field('Name', m.name),
    m.namespace ? field('Namespace', link(`/namespaces/${m.namespace}`, m.namespace)) : null,
    field('Created', `${age(m.creationTimestamp)} ago`, h('span', {class: 'muted'}, ` (${m.creationTimestamp})`)),
    ...fields,
    m.deletionTimestamp ? field('Deleting', badge('Terminating', 'warn')) : null,
    owners.length ? field('Controlled by', owners) : null,
    Object.keys(m.labels || {}).length ? field('Labels', chips(m.labels)) : null,
    Object.keys(m.annotations || {}).filter((k) => k !== 'kubectl.kubernetes.io/last-applied-configuration').length
      ? field('Annotations', chips(Object.fromEntries(Object.entries(m.annotations)
        .filter(([k]) => k !== 'kubectl.kubernetes.io/last-applied-configuration')
        .map(([k, v]) => [k, v.length > 80 ? `${v.slice(0, 77)}…` : v]))))
      : null,
  ));
}

const OWNER_ROUTES = {
  Deployment: 'deployments', StatefulSet: 'statefulsets', DaemonSet: 'daemonsets', Job: 'jobs',
  CronJob: 'cronjobs', ReplicaSet: 'replicasets',
};

/** The dashboard page of an owner reference, when there is one. */
export function ownerPath(o, ns) {
  if (OWNER_ROUTES[o.kind]) return `/workloads/${OWNER_ROUTES[o.kind]}/${ns}/${o.name}`;
  if (o.kind === 'Node') return `/nodes/${o.name}`;
  if (o.kind === 'Function') return `/functions/function/${ns}/${o.name}`;
  if (o.kind === 'Service' && o.apiVersion?.startsWith('serving.knative.dev')) return `/functions/ksvc/${ns}/${o.name}`;
  return null;
}

/** A status.conditions table. */
export function conditionsPanel(obj) {
  const conds = obj.status?.conditions || [];
  if (!conds.length) return null;
  return h('section', {class: 'panel'}, h('h2', null, 'Conditions'), h('div', {class: 'table-wrap'}, h('table', null,
    h('thead', null, h('tr', null, ['Type', 'Status', 'Reason', 'Message', 'Last transition'].map((t) => h('th', null, t)))),
    h('tbody', null, conds.map((c) => h('tr', null,
      h('td', null, c.type),
      h('td', null, badge(c.status, c.type.endsWith('Pressure') || c.type === 'NetworkUnavailable'
        ? (c.status === 'False' ? 'ok' : 'bad') : phaseKind(c.status))),
      h('td', null, c.reason || ''),
      h('td', {class: 'message'}, c.message || ''),
      h('td', null, c.lastTransitionTime ? age(c.lastTransitionTime) : '')))))));
}

/** Events about one object (or, with no name, a whole namespace), live. */
export function eventsPanel(signal, {ns, kind, name, title = 'Events'}) {
  const selector = [kind && `involvedObject.kind=${kind}`, name && `involvedObject.name=${name}`].filter(Boolean).join(',');
  const inf = new Informer(collection('v1', 'events', ns), selector ? {fieldSelector: selector} : {}).start(signal);
  const panel = liveTable({
    title,
    informer: inf,
    empty: 'No events.',
    columns: eventColumns(!name),
    order: newestEvents,
  });
  return panel;
}

/** The 50 latest events, newest first. */
export function newestEvents(items) {
  return items.sort((a, b) => eventTime(b) - eventTime(a)).slice(0, 50);
}

export function eventTime(e) {
  return Date.parse(e.lastTimestamp || e.eventTime || e.metadata?.creationTimestamp || 0) || 0;
}

/** Columns of an event table; `withObject` adds the object it is about. */
export function eventColumns(withObject) {
  return [
    ['Type', (e) => badge(e.type || 'Normal', e.type === 'Warning' ? 'bad' : 'idle')],
    ['Reason', (e) => e.reason || ''],
    ...(withObject ? [['Object', (e) => {
      const o = e.involvedObject || {};
      const path = objectPath(o.kind, o.namespace, o.name, o.apiVersion);
      const text = `${(o.kind || '').toLowerCase()}/${o.name}`;
      return path ? link(path, text) : text;
    }]] : []),
    ['Message', (e) => h('span', {class: 'message'}, e.message || '')],
    ['Count', (e) => String(e.count || e.series?.count || 1)],
    ['Last seen', (e) => age(new Date(eventTime(e)).toISOString())],
  ];
}

/** The dashboard page of an object named by kind, when it has one. */
export function objectPath(kind, ns, name, apiVersion = '') {
  switch (kind) {
    case 'Pod': return `/pods/${ns}/${name}`;
    case 'Node': return `/nodes/${name}`;
    case 'Namespace': return `/namespaces/${name}`;
    case 'Service':
      return apiVersion.startsWith('serving.knative.dev') ? `/functions/ksvc/${ns}/${name}` : `/services/${ns}/${name}`;
    case 'Function': return `/functions/function/${ns}/${name}`;
    case 'WorkflowRun': return `/workflowruns/${ns}/${name}`;
    case 'Workflow': return `/workflows/${ns}/${name}`;
    default: return OWNER_ROUTES[kind] ? `/workloads/${OWNER_ROUTES[kind]}/${ns}/${name}` : null;
  }
}

/** The object as YAML, folded. */
export function yamlPanel(obj) {
  const shown = structuredClone(obj);
  delete shown.metadata?.managedFields;
  return h('section', {class: 'panel'}, h('details', null,
    h('summary', null, 'YAML'),
    h('pre', {class: 'yaml'}, yaml(shown))));
}

/** A LabelSelector as the query parameter string (`a=b,c in (d)`). */
export function selectorString(sel) {
  if (!sel) return '';
  const parts = Object.entries(sel.matchLabels || {}).map(([k, v]) => `${k}=${v}`);
  for (const e of sel.matchExpressions || []) {
    switch (e.operator) {
      case 'In': parts.push(`${e.key} in (${e.values.join(',')})`); break;
      case 'NotIn': parts.push(`${e.key} notin (${e.values.join(',')})`); break;
      case 'Exists': parts.push(e.key); break;
      case 'DoesNotExist': parts.push(`!${e.key}`); break;
      default: break;
    }
  }
  return parts.join(',');
}

/** kubectl's pod STATUS column: the reason a container waits or ended, else the phase. */
export function podStatus(p) {
  if (p.metadata?.deletionTimestamp) return 'Terminating';
  const cs = [...(p.status?.initContainerStatuses || []), ...(p.status?.containerStatuses || [])];
  for (const c of cs) {
    const reason = c.state?.waiting?.reason || (c.state?.terminated && c.state.terminated.exitCode !== 0 && c.state.terminated.reason);
    if (reason && reason !== 'PodInitializing') return reason;
  }
  return p.status?.reason || p.status?.phase || 'Pending';
}

/** Ready containers over all containers (`1/2`). */
export function podReady(p) {
  const cs = p.status?.containerStatuses || [];
  const total = p.spec?.containers?.length || cs.length;
  return `${cs.filter((c) => c.ready).length}/${total}`;
}

export function restarts(p) {
  return String((p.status?.containerStatuses || []).reduce((a, c) => a + (c.restartCount || 0), 0));
}

/** Columns of a pod table. */
export function podColumns({withNamespace = !namespace(), withNode = true} = {}) {
  return [
    ['Name', (p) => p.metadata.name],
    ...(withNamespace ? [['Namespace', (p) => p.metadata.namespace]] : []),
    ['Ready', podReady],
    ['Status', (p) => { const st = podStatus(p); return badge(st, phaseKind(st)); }],
    ['Restarts', restarts],
    ...(withNode ? [['Node', (p) => (p.spec?.nodeName ? link(`/nodes/${p.spec.nodeName}`, p.spec.nodeName) : '')]] : []),
    ['IP', (p) => p.status?.podIP || ''],
    ['Age', (p) => age(p.metadata.creationTimestamp)],
  ];
}

/** Pods matching a label selector in `ns`, live. */
export function podsPanel(signal, {ns, selector, title = 'Pods', fieldSelector, withNode = true}) {
  const inf = new Informer(collection('v1', 'pods', ns), {labelSelector: selector, fieldSelector}).start(signal);
  return {
    informer: inf,
    panel: liveTable({
      title, informer: inf, empty: 'No pods.', href: (p) => `/pods/${p.metadata.namespace}/${p.metadata.name}`,
      columns: podColumns({withNamespace: !ns, withNode}),
    }),
  };
}

/**
 * CPU and memory of the pods `informer` holds (summed), redrawn when the set of pods changes.
 */
export function podsUsage(signal, ns, informer, filter = () => true) {
  const names = () => [...informer.items.values()].filter(filter).map((p) => p.metadata.name).sort();
  const panel = usagePanel(() => ({kind: 'pods', namespace: ns, pods: names()}), signal);
  let last = '';
  informer.subscribe(() => {
    const now = names().join(' ');
    if (now !== last) {
      last = now;
      panel.redraw();
    }
  });
  return panel;
}

/** A row of summary numbers at the top of a page. */
export function stats(...items) {
  return h('div', {class: 'stats'}, items.map(([label, value, kind]) => h('div', {class: ['stat', kind]},
    h('div', {class: 'stat-value'}, value), h('div', {class: 'stat-label'}, label))));
}

export {field};
