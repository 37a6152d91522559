// Nodes: their state, what they hold and what they use (the metrics API's latest reading,
// as kubectl top node shows it, against what the node can allocate).

import {Informer} from '../api.js';
import {h, age, badge, condition, cpu, bytes, quantity, replace} from '../dom.js';
import {sampler} from '../metrics.js';
import {usagePanel} from '../charts.js';
import {liveTable, detailPage, metadataPanel, conditionsPanel, eventsPanel, podsPanel, yamlPanel, field, pageHead} from './common.js';

/** Ready, NotReady or Unknown, and SchedulingDisabled when cordoned. */
export function nodeStatus(n) {
  const ready = condition(n, 'Ready');
  const st = ready?.status === 'True' ? 'Ready' : ready?.status === 'False' ? 'NotReady' : 'Unknown';
  return n.spec?.unschedulable ? `${st},SchedulingDisabled` : st;
}

function roles(n) {
  const r = Object.keys(n.metadata.labels || {})
    .filter((k) => k.startsWith('node-role.kubernetes.io/'))
    .map((k) => k.slice('node-role.kubernetes.io/'.length));
  return r.length ? r.join(',') : '<none>';
}

/** A bar of `used` out of `total`, with the numbers beside it. */
export function usageBar(used, total, format) {
  const frac = total > 0 && Number.isFinite(used) ? Math.min(1, used / total) : 0;
  const fill = h('div', {class: ['fill', frac > 0.9 ? 'bad' : frac > 0.7 ? 'warn' : 'ok']});
  fill.style.width = `${(frac * 100).toFixed(1)}%`;
  const text = Number.isFinite(used) ? `${format(used)} / ${format(total)} (${Math.round(frac * 100)}%)` : `– / ${format(total)}`;
  return h('div', {class: 'usage-cell'}, h('div', {class: 'bar'}, fill), h('span', {class: 'usage-text'}, text));
}

function cpuCell(n) {
  return usageBar(sampler.nodes.get(n.metadata.name)?.cpu, quantity(n.status?.allocatable?.cpu), cpu);
}

function memCell(n) {
  return usageBar(sampler.nodes.get(n.metadata.name)?.memory, quantity(n.status?.allocatable?.memory), bytes);
}

/**
 * The nodes table: state, usage and pods per node; redrawn by the nodes' watch, the pods'
 * watch (counts) and each metrics sample.
 */
export function nodesTable(signal, nodes, pods) {
  const podCount = (n) => {
    if (!pods?.synced) return '';
    const held = [...pods.items.values()].filter((p) => p.spec?.nodeName === n.metadata.name
      && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed').length;
    return `${held} / ${n.status?.allocatable?.pods || '?'}`;
  };
  const table = liveTable({
    title: 'Nodes',
    informer: nodes,
    href: (n) => `/nodes/${n.metadata.name}`,
    id: 'nodes',
    columns: [
      ['Name', (n) => n.metadata.name],
      ['Status', (n) => { const st = nodeStatus(n); return badge(st, st === 'Ready' ? 'ok' : st.startsWith('Ready') ? 'warn' : 'bad'); }],
      ['Roles', roles],
      ['CPU', cpuCell],
      ['Memory', memCell],
      ['Pods', podCount],
      ['Version', (n) => n.status?.nodeInfo?.kubeletVersion || ''],
      ['Age', (n) => age(n.metadata.creationTimestamp)],
    ],
  });
  const redraw = () => nodes.synced && nodes.notify();
  const off = sampler.subscribe(redraw);
  pods?.subscribe(redraw);
  signal.addEventListener('abort', off, {once: true});
  return table;
}

export function list(root, params, signal) {
  const nodes = new Informer('/api/v1/nodes').start(signal);
  const pods = new Informer('/api/v1/pods').start(signal);
  replace(root, pageHead('Nodes'), nodesTable(signal, nodes, pods), usagePanel({kind: 'cluster'}, signal));
}

function addresses(n) {
  return (n.status?.addresses || []).map((a) => h('span', {class: 'chip'}, `${a.type}: ${a.address}`));
}

function capacity(n) {
  const rows = Object.keys(n.status?.capacity || {}).sort().map((k) => h('tr', null,
    h('td', null, k), h('td', null, n.status.capacity[k]), h('td', null, n.status?.allocatable?.[k] ?? '')));
  return h('section', {class: 'panel'}, h('h2', null, 'Capacity'), h('table', null,
    h('thead', null, h('tr', null, h('th', null, 'Resource'), h('th', null, 'Capacity'), h('th', null, 'Allocatable'))),
    h('tbody', null, rows)));
}

export function detail(root, {name}, signal) {
  detailPage(root, signal, {
    groupVersion: 'v1', resource: 'nodes', name, title: 'Node',
    render: (n) => {
      const info = n.status?.nodeInfo || {};
      const st = nodeStatus(n);
      return [
        metadataPanel(n,
          field('Status', badge(st, st === 'Ready' ? 'ok' : 'bad')),
          field('Addresses', addresses(n)),
          field('Pod CIDR', n.spec?.podCIDR || ''),
          field('OS', `${info.osImage || ''} (${info.operatingSystem || ''}/${info.architecture || ''}), kernel ${info.kernelVersion || ''}`),
          field('Runtime', info.containerRuntimeVersion || ''),
          field('Kubelet', info.kubeletVersion || ''),
          (n.spec?.taints || []).length
            ? field('Taints', n.spec.taints.map((t) => h('span', {class: 'chip'}, `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`)))
            : null),
        h('div', {class: 'columns wide-first'}, conditionsPanel(n), capacity(n)),
        yamlPanel(n),
      ];
    },
    attach: () => [
      usagePanel({kind: 'node', name}, signal),
      podsPanel(signal, {ns: '', fieldSelector: `spec.nodeName=${name}`, title: 'Pods on this node', withNode: false}).panel,
      eventsPanel(signal, {ns: '', kind: 'Node', name}),
    ],
  });
}
