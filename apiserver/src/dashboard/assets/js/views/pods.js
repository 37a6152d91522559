// Pods: the list as kubectl get pods prints it, and a pod's containers, usage, events and
// logs, followed as the container writes them (`/log?follow=true` read as a stream).

import {stream, chunks, withQuery} from '../api.js';
import {h, age, badge, phaseKind, replace, link} from '../dom.js';
import {
  pageHead, liveTable, watchList, detailPage, metadataPanel, conditionsPanel, eventsPanel,
  yamlPanel, field, podColumns, podStatus, namespace, ownerPath,
} from './common.js';
import {usagePanel} from '../charts.js';

export function list(root, params, signal) {
  replace(root, pageHead('Pods', h('span', {class: 'sub'}, namespace() || 'all namespaces')), liveTable({
    title: 'Pods',
    id: 'pods',
    informer: watchList('v1', 'pods', signal),
    href: (p) => `/pods/${p.metadata.namespace}/${p.metadata.name}`,
    empty: 'No pods.',
    columns: podColumns(),
  }));
}

function containerState(st) {
  if (!st) return badge('Unknown', 'idle');
  if (st.running) return badge('Running', 'ok');
  if (st.waiting) return h('span', null, badge(st.waiting.reason || 'Waiting', 'warn'), st.waiting.message ? ` ${st.waiting.message}` : '');
  if (st.terminated) {
    const t = st.terminated;
    return badge(`${t.reason || 'Terminated'} (exit ${t.exitCode})`, t.exitCode === 0 ? 'idle' : 'bad');
  }
  return badge('Unknown', 'idle');
}

function containersPanel(p) {
  const statuses = new Map([...(p.status?.initContainerStatuses || []), ...(p.status?.containerStatuses || [])].map((c) => [c.name, c]));
  const rows = [...(p.spec?.initContainers || []).map((c) => [c, true]), ...(p.spec?.containers || []).map((c) => [c, false])]
    .map(([c, init]) => {
      const st = statuses.get(c.name);
      return h('tr', null,
        h('td', null, c.name, init ? h('span', {class: 'muted'}, ' (init)') : ''),
        h('td', null, h('code', null, c.image)),
        h('td', null, containerState(st?.state)),
        h('td', null, st ? (st.ready ? badge('Ready', 'ok') : badge('Not ready', init ? 'idle' : 'warn')) : ''),
        h('td', null, String(st?.restartCount || 0)),
        h('td', null, (c.ports || []).map((port) => h('span', {class: 'chip'}, `${port.containerPort}/${port.protocol || 'TCP'}`))));
    });
  return h('section', {class: 'panel'}, h('h2', null, 'Containers'), h('table', null,
    h('thead', null, h('tr', null, ['Name', 'Image', 'State', 'Ready', 'Restarts', 'Ports'].map((t) => h('th', null, t)))),
    h('tbody', null, rows)));
}

const MAX_LOG_CHARS = 200000;

/**
 * The logs of one container, followed: a stream that stays open while the container runs.
 * When the server cannot give one yet (the container is still being created) it is asked
 * again a few seconds later; a stream that ends (the container exited) stays ended until
 * the user reloads it.
 */
function logsPanel(signal, ns, name, containers) {
  const pre = h('pre', {class: 'logs', id: 'logs'});
  const status = h('span', {class: 'live'}, 'connecting');
  const select = h('select', {'aria-label': 'container'}, containers.map((c) => h('option', {value: c}, c)));
  const reload = h('button', {class: 'small', type: 'button', title: 'follow the logs again'}, 'Reload');
  let follow = null;
  const start = () => {
    follow?.abort();
    follow = new AbortController();
    const mine = follow;
    signal.addEventListener('abort', () => mine.abort(), {once: true});
    replace(pre);
    run(mine.signal, select.value);
  };
  const append = (text) => {
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.appendChild(document.createTextNode(text));
    if (pre.textContent.length > MAX_LOG_CHARS) pre.textContent = pre.textContent.slice(-MAX_LOG_CHARS / 2);
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };
  const run = async (sig, container) => {
    while (!sig.aborted) {
      try {
        replace(status, 'connecting');
        status.className = 'live';
        const resp = await stream(withQuery(`/api/v1/namespaces/${ns}/pods/${name}/log`, {
          container, follow: 'true', tailLines: '500',
        }), sig);
        replace(status, 'streaming');
        status.className = 'live on';
        for await (const text of chunks(resp)) append(text);
        replace(status, 'ended');
        status.className = 'live';
        return;
      } catch (e) {
        if (sig.aborted) return;
        replace(status, e.message);
        status.className = 'live error';
      }
      await new Promise((r) => { const t = setTimeout(r, 3000); sig.addEventListener('abort', () => { clearTimeout(t); r(); }, {once: true}); });
    }
  };
  select.addEventListener('change', start);
  reload.addEventListener('click', start);
  start();
  return h('section', {class: 'panel'}, h('h2', null, 'Logs ', status, ' ', containers.length > 1 ? select : '', ' ', reload), pre);
}

export function detail(root, {ns, name}, signal) {
  detailPage(root, signal, {
    groupVersion: 'v1', resource: 'pods', ns, name, title: 'Pod',
    render: (p) => {
      const st = podStatus(p);
      const owner = (p.metadata.ownerReferences || [])[0];
      const ownerLink = owner && ownerPath(owner, ns);
      return [
        metadataPanel(p,
          field('Status', badge(st, phaseKind(st)), p.status?.message ? ` ${p.status.message}` : ''),
          field('Node', p.spec?.nodeName ? link(`/nodes/${p.spec.nodeName}`, p.spec.nodeName) : '<none>'),
          field('Pod IP', p.status?.podIP || ''),
          field('QoS class', p.status?.qosClass || ''),
          field('Service account', p.spec?.serviceAccountName || ''),
          field('Started', p.status?.startTime ? `${age(p.status.startTime)} ago` : ''),
          owner && !ownerLink ? field('Owner', `${owner.kind}/${owner.name}`) : null),
        containersPanel(p),
        conditionsPanel(p),
        yamlPanel(p),
      ];
    },
    attach: (p) => {
      const containers = (p.spec?.containers || []).map((c) => c.name);
      return [
        usagePanel({kind: 'pods', namespace: ns, pods: [name]}, signal),
        logsPanel(signal, ns, name, containers),
        eventsPanel(signal, {ns, kind: 'Pod', name}),
      ];
    },
  });
}
