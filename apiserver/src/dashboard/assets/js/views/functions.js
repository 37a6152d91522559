// Functions (functions.minik8s.io) and Knative Services (serving.knative.dev): where they
// answer, their revisions, the pods serving them (a revision's own, and warm pool pods the
// activator specialized for it) and what those pods use.

import {Informer, collection} from '../api.js';
import {h, age, badge, phaseKind, replace, condition, link} from '../dom.js';
import {
  pageHead, liveTable, watchList, detailPage, metadataPanel, conditionsPanel, eventsPanel,
  yamlPanel, field, namespace, podColumns, podsUsage,
} from './common.js';

const FN = 'functions.minik8s.io/v1alpha1';
const SERVING = 'serving.knative.dev/v1';
const SERVICE_LABEL = 'serving.knative.dev/service';
const SPECIALIZED_LABEL = 'functions.minik8s.io/specialized';

function ready(o) {
  const c = condition(o, 'Ready');
  const st = c?.status === 'True' ? 'Ready' : c?.status === 'False' ? 'False' : 'Unknown';
  return badge(c?.status === 'True' ? 'Ready' : c?.reason || st, phaseKind(st === 'Ready' ? 'Ready' : st));
}

const nsColumn = () => (namespace() ? [] : [['Namespace', (o) => o.metadata.namespace]]);

export function list(root, params, signal) {
  replace(root, pageHead('Functions', h('span', {class: 'sub'}, namespace() || 'all namespaces')),
    liveTable({
      title: 'Functions',
      id: 'functions',
      informer: watchList(FN, 'functions', signal),
      href: (f) => `/functions/function/${f.metadata.namespace}/${f.metadata.name}`,
      empty: 'No Functions. Deploy one with kubectl fn deploy NAME --from-file handler.py.',
      columns: [
        ['Name', (f) => f.metadata.name],
        ...nsColumn(),
        ['Path', (f) => h('code', null, f.status?.path || '')],
        ['Revision', (f) => f.status?.latestReadyRevisionName || ''],
        ['Ready', ready],
        ['Age', (f) => age(f.metadata.creationTimestamp)],
      ],
    }),
    liveTable({
      title: 'Knative Services',
      id: 'ksvcs',
      informer: watchList(SERVING, 'services', signal),
      href: (s) => `/functions/ksvc/${s.metadata.namespace}/${s.metadata.name}`,
      empty: 'No Knative Services.',
      columns: [
        ['Name', (s) => s.metadata.name],
        ...nsColumn(),
        ['URL', (s) => s.status?.url || ''],
        ['Latest ready', (s) => s.status?.latestReadyRevisionName || ''],
        ['Ready', ready],
        ['Of Function', (s) => ((s.metadata.ownerReferences || []).some((o) => o.kind === 'Function')
          ? link(`/functions/function/${s.metadata.namespace}/${s.metadata.name}`, s.metadata.name) : '')],
        ['Age', (s) => age(s.metadata.creationTimestamp)],
      ],
    }));
}

function revisionsPanel(signal, ns, service) {
  return liveTable({
    title: 'Revisions',
    informer: new Informer(collection(SERVING, 'revisions', ns), {labelSelector: `${SERVICE_LABEL}=${service}`}).start(signal),
    empty: 'No revisions.',
    columns: [
      ['Name', (r) => r.metadata.name],
      ['Ready', ready],
      ['Actual replicas', (r) => String(r.status?.actualReplicas ?? 0)],
      ['Desired replicas', (r) => String(r.status?.desiredReplicas ?? 0)],
      ['Age', (r) => age(r.metadata.creationTimestamp)],
    ],
  });
}

/**
 * The pods serving a Knative Service: those of its revisions, and pool pods specialized for
 * one of them. Two watches behind one informer-shaped object, for liveTable.
 */
function servingPods(signal, ns, service) {
  const own = new Informer(collection('v1', 'pods', ns), {labelSelector: `${SERVICE_LABEL}=${service}`}).start(signal);
  const pool = new Informer(collection('v1', 'pods', ns), {labelSelector: SPECIALIZED_LABEL}).start(signal);
  const revision = new RegExp(`^${service.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}-[0-9]{5}$`);
  const both = {
    listeners: new Set(),
    get synced() { return own.synced && pool.synced; },
    get error() { return own.error || pool.error; },
    get state() { return own.state === 'live' && pool.state === 'live' ? 'live' : own.state === 'error' || pool.state === 'error' ? 'error' : 'syncing'; },
    get items() {
      const m = new Map(own.items);
      for (const [k, p] of pool.items) if (revision.test(p.metadata.labels?.[SPECIALIZED_LABEL] || '')) m.set(k, p);
      return m;
    },
    list() { return [...this.items.values()].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name)); },
    subscribe(fn) { this.listeners.add(fn); if (this.synced) fn(this); return () => this.listeners.delete(fn); },
    notify() { for (const fn of this.listeners) fn(this); },
  };
  own.subscribe(() => both.notify());
  pool.subscribe(() => both.notify());
  return both;
}

function servingSections(signal, ns, name, kind) {
  const pods = servingPods(signal, ns, name);
  return [
    revisionsPanel(signal, ns, name),
    liveTable({
      title: 'Pods', informer: pods, empty: 'No pods: scaled to zero.',
      href: (p) => `/pods/${p.metadata.namespace}/${p.metadata.name}`,
      columns: podColumns({withNamespace: false}),
    }),
    podsUsage(signal, ns, pods),
    eventsPanel(signal, {ns, kind, name}),
  ];
}

export function functionDetail(root, {ns, name}, signal) {
  detailPage(root, signal, {
    groupVersion: FN, resource: 'functions', ns, name, title: 'Function',
    render: (f) => {
      const sc = f.spec?.scaling || {};
      const from = f.spec?.sourceFrom?.configMapKeyRef;
      return [
        metadataPanel(f,
          field('Ready', ready(f)),
          field('Runtime', f.spec?.runtime || 'python3'),
          field('Handler', f.spec?.handler || 'handle'),
          field('Gateway path', h('code', null, f.status?.path || '')),
          field('URL', f.status?.url || ''),
          field('Revision', f.status?.latestReadyRevisionName || f.status?.latestCreatedRevisionName || ''),
          Object.keys(sc).length ? field('Scaling', Object.entries(sc).map(([k, v]) => h('span', {class: 'chip'}, `${k}=${v}`))) : null,
          field('Knative Service', link(`/functions/ksvc/${ns}/${name}`, name))),
        conditionsPanel(f),
        h('section', {class: 'panel'}, h('details', {open: true}, h('summary', null, 'Source'),
          f.spec?.source ? h('pre', {class: 'source'}, f.spec.source)
            : h('p', null, from ? `From key ${from.key} of ConfigMap ${from.name}.` : 'No source.'),
          f.spec?.requirements ? [h('h3', null, 'requirements.txt'), h('pre', {class: 'source'}, f.spec.requirements)] : null)),
        yamlPanel(f),
      ];
    },
    attach: () => servingSections(signal, ns, name, 'Function'),
  });
}

export function serviceDetail(root, {ns, name}, signal) {
  detailPage(root, signal, {
    groupVersion: SERVING, resource: 'services', ns, name, title: 'Knative Service',
    render: (s) => [
      metadataPanel(s,
        field('Ready', ready(s)),
        field('URL', s.status?.url || ''),
        field('Latest created', s.status?.latestCreatedRevisionName || ''),
        field('Latest ready', s.status?.latestReadyRevisionName || ''),
        field('Traffic', (s.status?.traffic || []).map((t) => h('span', {class: 'chip'}, `${t.revisionName || t.configurationName || 'latest'}: ${t.percent ?? 0}%`)))),
      conditionsPanel(s),
      yamlPanel(s),
    ],
    attach: () => servingSections(signal, ns, name, 'Service'),
  });
}
