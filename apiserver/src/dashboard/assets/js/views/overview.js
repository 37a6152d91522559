// The cluster at a glance: nodes and what they use, pods by phase, workloads that are not
// where they should be, and the latest Warning events, all across namespaces.

import {Informer} from '../api.js';
import {h, replace, badge} from '../dom.js';
import {usagePanel} from '../charts.js';
import {nodesTable, nodeStatus} from './nodes.js';
import {pageHead, liveTable, eventColumns, newestEvents, stats, contentReady} from './common.js';

const PHASES = ['Running', 'Pending', 'Succeeded', 'Failed', 'Unknown'];

/** Pods by phase: a stacked bar and its legend. */
function phasesPanel(pods) {
  const body = h('div', {class: 'phases-body'});
  const panel = h('section', {class: 'panel', id: 'pod-phases'}, h('h2', null, 'Pods by phase'), body);
  pods.subscribe(() => {
    if (!pods.synced) return;
    const counts = Object.fromEntries(PHASES.map((p) => [p, 0]));
    for (const p of pods.items.values()) counts[PHASES.includes(p.status?.phase) ? p.status.phase : 'Unknown']++;
    const total = pods.items.size;
    const bar = h('div', {class: 'stacked'});
    for (const phase of PHASES) {
      if (!counts[phase]) continue;
      const seg = h('div', {class: ['seg', phase.toLowerCase()], title: `${phase}: ${counts[phase]}`});
      seg.style.flexGrow = String(counts[phase]);
      bar.appendChild(seg);
    }
    replace(body, total ? bar : h('p', {class: 'empty'}, 'No pods.'), h('ul', {class: 'legend'},
      PHASES.map((phase) => h('li', {'data-phase': phase},
        h('span', {class: ['swatch', phase.toLowerCase()]}), `${phase} `, h('strong', null, String(counts[phase]))))));
  });
  return panel;
}

function summary(nodes, pods, deployments, namespaces, warnings) {
  const box = h('div');
  const draw = () => {
    const ready = [...nodes.items.values()].filter((n) => nodeStatus(n) === 'Ready').length;
    const running = [...pods.items.values()].filter((p) => p.status?.phase === 'Running').length;
    const deps = [...deployments.items.values()];
    const available = deps.filter((d) => (d.status?.availableReplicas || 0) >= (d.spec?.replicas ?? 1)).length;
    replace(box, stats(
      ['Nodes ready', nodes.synced ? `${ready} / ${nodes.items.size}` : '…', ready === nodes.items.size ? 'ok' : 'bad'],
      ['Pods running', pods.synced ? `${running} / ${pods.items.size}` : '…', 'info'],
      ['Deployments available', deployments.synced ? `${available} / ${deps.length}` : '…', available === deps.length ? 'ok' : 'warn'],
      ['Namespaces', namespaces.synced ? String(namespaces.items.size) : '…', 'info'],
      ['Warning events', warnings.synced ? String(warnings.items.size) : '…', warnings.items.size ? 'warn' : 'ok'],
    ));
  };
  for (const inf of [nodes, pods, deployments, namespaces, warnings]) inf.subscribe(draw);
  draw();
  return box;
}

export function render(root, params, signal) {
  const nodes = new Informer('/api/v1/nodes').start(signal);
  const pods = new Informer('/api/v1/pods').start(signal);
  const deployments = new Informer('/apis/apps/v1/deployments').start(signal);
  const namespaces = new Informer('/api/v1/namespaces').start(signal);
  const warnings = new Informer('/api/v1/events', {fieldSelector: 'type=Warning'}).start(signal);
  const notAvailable = liveTable({
    title: 'Deployments not available',
    informer: deployments,
    filter: (d) => (d.status?.availableReplicas || 0) < (d.spec?.replicas ?? 1),
    href: (d) => `/workloads/deployments/${d.metadata.namespace}/${d.metadata.name}`,
    empty: 'Every Deployment has its replicas available.',
    columns: [
      ['Name', (d) => d.metadata.name],
      ['Namespace', (d) => d.metadata.namespace],
      ['Available', (d) => badge(`${d.status?.availableReplicas || 0} / ${d.spec?.replicas ?? 1}`, 'warn')],
    ],
  });
  replace(root,
    pageHead('Cluster overview', h('span', {class: 'sub'}, 'all namespaces')),
    summary(nodes, pods, deployments, namespaces, warnings),
    nodesTable(signal, nodes, pods),
    h('div', {class: 'columns'}, phasesPanel(pods), notAvailable),
    usagePanel({kind: 'cluster'}, signal),
    liveTable({
      title: 'Recent warnings',
      informer: warnings,
      id: 'warnings',
      empty: 'No Warning events.',
      columns: eventColumns(true),
      order: (items) => newestEvents(items).slice(0, 10),
    }));
  nodes.subscribe(() => nodes.synced && contentReady());
}
