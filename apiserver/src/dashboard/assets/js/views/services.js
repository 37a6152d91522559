// Services: how each is reached (type, cluster IP, ports) and what answers behind it (its
// EndpointSlices' addresses and the pods its selector picks).

import {Informer, collection} from '../api.js';
import {h, age, badge, replace, link} from '../dom.js';
import {pageHead, liveTable, watchList, detailPage, metadataPanel, eventsPanel, podsPanel, yamlPanel, field, namespace} from './common.js';

function ports(svc) {
  return (svc.spec?.ports || []).map((p) => `${p.port}${p.nodePort ? `:${p.nodePort}` : ''}/${p.protocol || 'TCP'}`).join(',') || '<none>';
}

function externalIp(svc) {
  const lb = (svc.status?.loadBalancer?.ingress || []).map((i) => i.ip || i.hostname);
  const ips = [...(svc.spec?.externalIPs || []), ...lb];
  if (ips.length) return ips.join(',');
  if (svc.spec?.type === 'ExternalName') return svc.spec.externalName || '';
  return svc.spec?.type === 'LoadBalancer' ? '<pending>' : '<none>';
}

export function list(root, params, signal) {
  replace(root, pageHead('Services', h('span', {class: 'sub'}, namespace() || 'all namespaces')), liveTable({
    title: 'Services',
    id: 'services',
    informer: watchList('v1', 'services', signal),
    href: (s) => `/services/${s.metadata.namespace}/${s.metadata.name}`,
    empty: 'No Services.',
    columns: [
      ['Name', (s) => s.metadata.name],
      ...(namespace() ? [] : [['Namespace', (s) => s.metadata.namespace]]),
      ['Type', (s) => s.spec?.type || 'ClusterIP'],
      ['Cluster IP', (s) => s.spec?.clusterIP || ''],
      ['External IP', externalIp],
      ['Ports', ports],
      ['Age', (s) => age(s.metadata.creationTimestamp)],
    ],
  }));
}

function portsPanel(svc) {
  const rows = (svc.spec?.ports || []).map((p) => h('tr', null,
    h('td', null, p.name || ''), h('td', null, String(p.port)), h('td', null, String(p.targetPort ?? p.port)),
    h('td', null, p.nodePort ? String(p.nodePort) : ''), h('td', null, p.protocol || 'TCP')));
  if (!rows.length) return null;
  return h('section', {class: 'panel'}, h('h2', null, 'Ports'), h('table', null,
    h('thead', null, h('tr', null, ['Name', 'Port', 'Target port', 'Node port', 'Protocol'].map((t) => h('th', null, t)))),
    h('tbody', null, rows)));
}

/** The Service's endpoints, one row per address of its EndpointSlices, live. */
function endpointsPanel(signal, ns, name) {
  const slices = new Informer(collection('discovery.k8s.io/v1', 'endpointslices', ns),
    {labelSelector: `kubernetes.io/service-name=${name}`}).start(signal);
  const body = h('div', {class: 'table-wrap'});
  const panel = h('section', {class: 'panel', id: 'endpoints'}, h('h2', null, 'Endpoints'), body);
  slices.subscribe(() => {
    const rows = [];
    for (const slice of slices.items.values()) {
      const portText = (slice.ports || []).map((p) => `${p.port}/${p.protocol || 'TCP'}`).join(',');
      for (const ep of slice.endpoints || []) {
        const ready = ep.conditions?.ready !== false;
        const target = ep.targetRef;
        rows.push(h('tr', null,
          h('td', null, (ep.addresses || []).join(',')),
          h('td', null, portText),
          h('td', null, badge(ready ? 'Ready' : 'Not ready', ready ? 'ok' : 'warn')),
          h('td', null, target?.kind === 'Pod' ? link(`/pods/${target.namespace || ns}/${target.name}`, target.name) : target?.name || ''),
          h('td', null, ep.nodeName ? link(`/nodes/${ep.nodeName}`, ep.nodeName) : '')));
      }
    }
    replace(body, rows.length ? h('table', null,
      h('thead', null, h('tr', null, ['Address', 'Ports', 'State', 'Pod', 'Node'].map((t) => h('th', null, t)))),
      h('tbody', null, rows)) : h('p', {class: 'empty'}, slices.error ? slices.error.message : 'No endpoints.'));
  });
  return panel;
}

export function detail(root, {ns, name}, signal) {
  detailPage(root, signal, {
    groupVersion: 'v1', resource: 'services', ns, name, title: 'Service',
    render: (svc) => [
      metadataPanel(svc,
        field('Type', svc.spec?.type || 'ClusterIP'),
        field('Cluster IPs', (svc.spec?.clusterIPs || [svc.spec?.clusterIP]).filter(Boolean).join(', ') || '<none>'),
        field('External IP', externalIp(svc)),
        field('Selector', Object.entries(svc.spec?.selector || {}).map(([k, v]) => h('span', {class: 'chip'}, `${k}=${v}`))),
        field('Session affinity', svc.spec?.sessionAffinity || 'None'),
        field('DNS name', h('code', null, `${name}.${ns}.svc.cluster.local`))),
      portsPanel(svc),
      yamlPanel(svc),
    ],
    attach: (svc) => {
      const selector = Object.entries(svc.spec?.selector || {}).map(([k, v]) => `${k}=${v}`).join(',');
      return [
        endpointsPanel(signal, ns, name),
        selector ? podsPanel(signal, {ns, selector, title: 'Pods selected'}).panel : null,
        eventsPanel(signal, {ns, kind: 'Service', name}),
      ];
    },
  });
}
