// Namespaces: their phase and what runs in them.

import {Informer} from '../api.js';
import {h, age, badge, phaseKind, replace} from '../dom.js';
import {pageHead, liveTable, detailPage, metadataPanel, conditionsPanel, eventsPanel, podsPanel, yamlPanel, field, stats} from './common.js';

export function list(root, params, signal) {
  const namespaces = new Informer('/api/v1/namespaces').start(signal);
  const pods = new Informer('/api/v1/pods').start(signal);
  const count = (ns) => (pods.synced ? String([...pods.items.values()].filter((p) => p.metadata.namespace === ns.metadata.name).length) : '');
  replace(root, pageHead('Namespaces'), liveTable({
    title: 'Namespaces',
    informer: namespaces,
    href: (ns) => `/namespaces/${ns.metadata.name}`,
    columns: [
      ['Name', (ns) => ns.metadata.name],
      ['Status', (ns) => badge(ns.status?.phase || 'Active', phaseKind(ns.status?.phase || 'Active'))],
      ['Pods', count],
      ['Age', (ns) => age(ns.metadata.creationTimestamp)],
    ],
  }));
  pods.subscribe(() => namespaces.synced && namespaces.notify());
}

/** How many of each kind the namespace holds, live. */
function counts(signal, ns) {
  const kinds = [
    ['Pods', `/api/v1/namespaces/${ns}/pods`],
    ['Deployments', `/apis/apps/v1/namespaces/${ns}/deployments`],
    ['Services', `/api/v1/namespaces/${ns}/services`],
    ['Functions', `/apis/functions.minik8s.io/v1alpha1/namespaces/${ns}/functions`],
    ['Workflow runs', `/apis/functions.minik8s.io/v1alpha1/namespaces/${ns}/workflowruns`],
  ].map(([label, path]) => [label, new Informer(path).start(signal)]);
  const box = h('div');
  const draw = () => replace(box, stats(...kinds.map(([label, inf]) => [label, inf.synced ? String(inf.items.size) : inf.error ? '–' : '…', 'info'])));
  for (const [, inf] of kinds) inf.subscribe(draw);
  draw();
  return box;
}

export function detail(root, {name}, signal) {
  detailPage(root, signal, {
    groupVersion: 'v1', resource: 'namespaces', name, title: 'Namespace',
    render: (ns) => [
      metadataPanel(ns, field('Status', badge(ns.status?.phase || 'Active', phaseKind(ns.status?.phase || 'Active')))),
      conditionsPanel(ns),
      yamlPanel(ns),
    ],
    attach: () => [
      counts(signal, name),
      podsPanel(signal, {ns: name}).panel,
      eventsPanel(signal, {ns: name}),
    ],
  });
}
