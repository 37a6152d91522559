// Workloads: Deployments, StatefulSets, DaemonSets, Jobs and CronJobs, with the columns
// kubectl get prints for each, and a detail page with the pods each one selects.

import {Informer, collection} from '../api.js';
import {h, age, badge, replace, condition} from '../dom.js';
import {
  pageHead, liveTable, watchList, detailPage, metadataPanel, conditionsPanel, eventsPanel,
  podsPanel, podsUsage, yamlPanel, field, selectorString, namespace,
} from './common.js';

const nsColumn = () => (namespace() ? [] : [['Namespace', (o) => o.metadata.namespace]]);
const n = (v) => String(v ?? 0);

function jobStatus(j) {
  if (condition(j, 'Complete')?.status === 'True') return badge('Complete', 'ok');
  if (condition(j, 'Failed')?.status === 'True') return badge('Failed', 'bad');
  if (j.spec?.suspend) return badge('Suspended', 'idle');
  return badge('Running', 'warn');
}

function duration(from, to) {
  if (!from) return '';
  const secs = Math.round(((to ? Date.parse(to) : Date.now()) - Date.parse(from)) / 1000);
  return secs < 120 ? `${secs}s` : secs < 7200 ? `${Math.round(secs / 60)}m` : `${Math.round(secs / 3600)}h`;
}

/** Per kind: its API, list columns and detail fields. */
export const KINDS = {
  deployments: {
    title: 'Deployments', kind: 'Deployment', gv: 'apps/v1',
    columns: [
      ['Ready', (d) => { const r = d.status?.readyReplicas || 0; const w = d.spec?.replicas ?? 1; return badge(`${r}/${w}`, r >= w ? 'ok' : 'warn'); }],
      ['Up-to-date', (d) => n(d.status?.updatedReplicas)],
      ['Available', (d) => n(d.status?.availableReplicas)],
    ],
    fields: (d) => [
      field('Replicas', `${n(d.spec?.replicas ?? 1)} desired, ${n(d.status?.updatedReplicas)} updated, ${n(d.status?.readyReplicas)} ready, ${n(d.status?.availableReplicas)} available`),
      field('Strategy', d.spec?.strategy?.type || 'RollingUpdate'),
    ],
  },
  statefulsets: {
    title: 'StatefulSets', kind: 'StatefulSet', gv: 'apps/v1',
    columns: [
      ['Ready', (s) => { const r = s.status?.readyReplicas || 0; const w = s.spec?.replicas ?? 1; return badge(`${r}/${w}`, r >= w ? 'ok' : 'warn'); }],
      ['Service', (s) => s.spec?.serviceName || ''],
    ],
    fields: (s) => [
      field('Replicas', `${n(s.spec?.replicas ?? 1)} desired, ${n(s.status?.currentReplicas)} current, ${n(s.status?.readyReplicas)} ready`),
      field('Service', s.spec?.serviceName || ''),
      field('Pod management', s.spec?.podManagementPolicy || 'OrderedReady'),
    ],
  },
  daemonsets: {
    title: 'DaemonSets', kind: 'DaemonSet', gv: 'apps/v1',
    columns: [
      ['Desired', (d) => n(d.status?.desiredNumberScheduled)],
      ['Current', (d) => n(d.status?.currentNumberScheduled)],
      ['Ready', (d) => { const r = d.status?.numberReady || 0; const w = d.status?.desiredNumberScheduled || 0; return badge(String(r), r >= w ? 'ok' : 'warn'); }],
      ['Available', (d) => n(d.status?.numberAvailable)],
    ],
    fields: (d) => [
      field('Nodes', `${n(d.status?.desiredNumberScheduled)} desired, ${n(d.status?.currentNumberScheduled)} scheduled, ${n(d.status?.numberReady)} ready`),
    ],
  },
  jobs: {
    title: 'Jobs', kind: 'Job', gv: 'batch/v1',
    columns: [
      ['Status', jobStatus],
      ['Completions', (j) => `${n(j.status?.succeeded)}/${j.spec?.completions ?? 1}`],
      ['Duration', (j) => duration(j.status?.startTime, j.status?.completionTime)],
    ],
    fields: (j) => [
      field('Status', jobStatus(j)),
      field('Pods', `${n(j.status?.active)} active, ${n(j.status?.succeeded)} succeeded, ${n(j.status?.failed)} failed`),
      field('Duration', duration(j.status?.startTime, j.status?.completionTime)),
    ],
  },
  cronjobs: {
    title: 'CronJobs', kind: 'CronJob', gv: 'batch/v1',
    columns: [
      ['Schedule', (c) => h('code', null, c.spec?.schedule || '')],
      ['Suspend', (c) => String(!!c.spec?.suspend)],
      ['Active', (c) => n(c.status?.active?.length)],
      ['Last schedule', (c) => (c.status?.lastScheduleTime ? age(c.status.lastScheduleTime) : '<none>')],
    ],
    fields: (c) => [
      field('Schedule', h('code', null, c.spec?.schedule || ''), c.spec?.timeZone ? ` (${c.spec.timeZone})` : ''),
      field('Suspend', String(!!c.spec?.suspend)),
      field('Last schedule', c.status?.lastScheduleTime ? `${age(c.status.lastScheduleTime)} ago` : '<none>'),
    ],
  },
  replicasets: {
    title: 'ReplicaSets', kind: 'ReplicaSet', gv: 'apps/v1', hidden: true,
    columns: [['Ready', (r) => `${n(r.status?.readyReplicas)}/${n(r.spec?.replicas)}`]],
    fields: (r) => [field('Replicas', `${n(r.spec?.replicas)} desired, ${n(r.status?.readyReplicas)} ready`)],
  },
};

export function list(root, params, signal) {
  const panels = Object.entries(KINDS).filter(([, k]) => !k.hidden).map(([resource, k]) => liveTable({
    title: k.title,
    id: resource,
    informer: watchList(k.gv, resource, signal),
    href: (o) => `/workloads/${resource}/${o.metadata.namespace}/${o.metadata.name}`,
    empty: `No ${k.title}.`,
    columns: [['Name', (o) => o.metadata.name], ...nsColumn(), ...k.columns, ['Age', (o) => age(o.metadata.creationTimestamp)]],
  }));
  replace(root, pageHead('Workloads', h('span', {class: 'sub'}, namespace() || 'all namespaces')), ...panels);
}

/** The Jobs a CronJob started (its controller reference), live. */
function jobsOf(signal, ns, cronjob) {
  return liveTable({
    title: 'Jobs',
    informer: new Informer(collection('batch/v1', 'jobs', ns)).start(signal),
    filter: (j) => (j.metadata.ownerReferences || []).some((o) => o.kind === 'CronJob' && o.uid === cronjob.metadata.uid),
    href: (j) => `/workloads/jobs/${ns}/${j.metadata.name}`,
    empty: 'No Jobs.',
    columns: [['Name', (j) => j.metadata.name], ...KINDS.jobs.columns, ['Age', (j) => age(j.metadata.creationTimestamp)]],
  });
}

export function detail(root, {resource, ns, name}, signal) {
  const k = KINDS[resource];
  if (!k) {
    replace(root, pageHead('Not found'), h('div', {class: 'error'}, `No workload kind ${resource}.`));
    return;
  }
  detailPage(root, signal, {
    groupVersion: k.gv, resource, ns, name, title: k.kind,
    render: (o) => [
      metadataPanel(o, ...k.fields(o),
        o.spec?.selector ? field('Selector', h('code', null, selectorString(o.spec.selector))) : null,
        field('Images', (o.spec?.template?.spec?.containers || o.spec?.jobTemplate?.spec?.template?.spec?.containers || [])
          .map((c) => h('span', {class: 'chip'}, c.image)))),
      conditionsPanel(o),
      yamlPanel(o),
    ],
    attach: (o) => {
      if (resource === 'cronjobs') return [jobsOf(signal, ns, o), eventsPanel(signal, {ns, kind: k.kind, name})];
      const pods = podsPanel(signal, {ns, selector: selectorString(o.spec?.selector)});
      return [pods.panel, podsUsage(signal, ns, pods.informer), eventsPanel(signal, {ns, kind: k.kind, name})];
    },
  });
}
