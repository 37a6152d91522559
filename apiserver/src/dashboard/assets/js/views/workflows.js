// Workflows and their runs: the state machine as a graph, and for a run the way it went
// through it (redrawn at each step, since the run is watched), with its history.

import {Informer, collection, get} from '../api.js';
import {h, age, badge, phaseKind, replace, link, errorBox} from '../dom.js';
import {render as graph} from '../graph.js';
import {pageHead, liveTable, watchList, detailPage, metadataPanel, conditionsPanel, eventsPanel, yamlPanel, field, namespace} from './common.js';

const GV = 'functions.minik8s.io/v1alpha1';
const WORKFLOW_LABEL = 'functions.minik8s.io/workflow';

const nsColumn = () => (namespace() ? [] : [['Namespace', (o) => o.metadata.namespace]]);

function phase(run) {
  const p = run.status?.phase || 'Pending';
  return badge(p, p === 'Running' ? 'info' : phaseKind(p));
}

function runColumns(withWorkflow = true) {
  return [
    ['Name', (r) => r.metadata.name],
    ...nsColumn(),
    ...(withWorkflow ? [['Workflow', (r) => link(`/workflows/${r.metadata.namespace}/${r.spec?.workflow}`, r.spec?.workflow || '')]] : []),
    ['Phase', phase],
    ['Transitions', (r) => String(r.status?.transitions ?? 0)],
    ['Duration', (r) => r.status?.duration || ''],
    ['Age', (r) => age(r.metadata.creationTimestamp)],
  ];
}

/** Runs newest first. */
const newest = (items) => items.sort((a, b) => Date.parse(b.metadata.creationTimestamp) - Date.parse(a.metadata.creationTimestamp));

export function list(root, params, signal) {
  replace(root, pageHead('Workflows', h('span', {class: 'sub'}, namespace() || 'all namespaces')),
    liveTable({
      title: 'Workflows',
      id: 'workflows',
      informer: watchList(GV, 'workflows', signal),
      href: (w) => `/workflows/${w.metadata.namespace}/${w.metadata.name}`,
      empty: 'No Workflows.',
      columns: [
        ['Name', (w) => w.metadata.name],
        ...nsColumn(),
        ['Start', (w) => w.status?.startAt || ''],
        ['States', (w) => String(w.status?.states ?? '')],
        ['Functions', (w) => (w.status?.functions || []).join(', ')],
        ['Age', (w) => age(w.metadata.creationTimestamp)],
      ],
    }),
    liveTable({
      title: 'Workflow runs',
      id: 'workflowruns',
      informer: watchList(GV, 'workflowruns', signal),
      href: (r) => `/workflowruns/${r.metadata.namespace}/${r.metadata.name}`,
      empty: 'No runs. Start one with kubectl fn run WORKFLOW --input \'{}\'.',
      columns: runColumns(),
      order: newest,
    }));
}

/** A definition as an object: the spec may hold it as JSON text. */
function parsed(definition) {
  if (typeof definition !== 'string') return definition;
  try {
    return JSON.parse(definition);
  } catch {
    return null;
  }
}

function graphPanel(definition, status) {
  const def = parsed(definition);
  const legend = status ? h('ul', {class: 'legend graph-legend'},
    [['exited', 'exited'], ['current', 'entered, not left'], ['failed', 'failed'], ['unvisited', 'not entered']]
      .map(([cls, text]) => h('li', null, h('span', {class: ['swatch', `state-${cls}`]}), text))) : null;
  let body;
  if (!def?.States) body = h('p', {class: 'empty'}, 'The definition is not JSON the dashboard can draw; see the YAML.');
  else {
    try {
      body = h('div', {class: 'graph-wrap', id: 'graph'}, graph(def, status));
    } catch (e) {
      body = errorBox(e);
    }
  }
  return h('section', {class: 'panel'}, h('h2', null, status ? 'States this run went through' : 'State machine'), legend, body);
}

function historyPanel(run) {
  const events = run.status?.history || [];
  const dropped = run.status?.historyDropped;
  const start = events.length ? Date.parse(events[0].timestamp) : 0;
  return h('section', {class: 'panel'}, h('h2', null, 'History'),
    dropped ? h('p', {class: 'muted'}, `${dropped} earlier events not kept.`) : null,
    events.length ? h('table', {class: 'history'},
      h('thead', null, h('tr', null, ['Time', 'Thread', 'Event', 'State', 'Attempt', 'Error'].map((t) => h('th', null, t)))),
      h('tbody', null, events.map((e) => h('tr', {'data-type': e.type},
        h('td', {title: e.timestamp}, `+${Math.round((Date.parse(e.timestamp) - start) / 1000)}s`),
        h('td', null, e.thread || ''),
        h('td', null, badge(e.type, e.type === 'StateExited' ? 'ok' : e.type.endsWith('Failed') ? 'bad' : 'info')),
        h('td', null, e.state),
        h('td', null, e.attempt ? String(e.attempt) : ''),
        h('td', {class: 'message'}, [e.error, e.cause].filter(Boolean).join(': ')))))) : h('p', {class: 'empty'}, 'No history yet.'));
}

function json(title, value) {
  if (value === undefined || value === null) return null;
  return h('div', null, h('h3', null, title), h('pre', {class: 'source'}, JSON.stringify(value, null, 2)));
}

export function runDetail(root, {ns, name}, signal) {
  // The definition the run started with; older runs without it are drawn on the Workflow's.
  const workflows = new Map();
  let redraw = null;
  const page = detailPage(root, signal, {
    groupVersion: GV, resource: 'workflowruns', ns, name, title: 'Workflow run',
    render: (run) => {
      let definition = run.status?.definition;
      const wf = run.spec?.workflow;
      if (!definition && wf) {
        if (!workflows.has(wf)) {
          workflows.set(wf, null);
          get(`${collection(GV, 'workflows', ns)}/${wf}`, signal)
            .then((w) => { workflows.set(wf, w.spec?.definition); redraw?.(); })
            .catch(() => {});
        }
        definition = workflows.get(wf);
      }
      return [
        metadataPanel(run,
          field('Workflow', link(`/workflows/${ns}/${wf}`, wf || '')),
          field('Phase', phase(run)),
          field('Started', run.status?.startTime ? `${age(run.status.startTime)} ago` : ''),
          field('Duration', run.status?.duration || ''),
          field('Transitions', String(run.status?.transitions ?? 0)),
          run.status?.error ? field('Error', h('code', null, run.status.error), run.status.cause ? ` ${run.status.cause}` : '') : null),
        definition ? graphPanel(definition, run.status || {}) : h('section', {class: 'panel'}, h('p', {class: 'empty'}, 'Loading the definition…')),
        historyPanel(run),
        h('section', {class: 'panel io'}, h('h2', null, 'Input and output'),
          json('Input', run.spec?.input ?? {}), json('Output', run.status?.output)),
        yamlPanel(run),
      ];
    },
    attach: () => [eventsPanel(signal, {ns, kind: 'WorkflowRun', name})],
  });
  redraw = page.redraw;
}

export function workflowDetail(root, {ns, name}, signal) {
  detailPage(root, signal, {
    groupVersion: GV, resource: 'workflows', ns, name, title: 'Workflow',
    render: (w) => [
      metadataPanel(w,
        field('Start at', w.status?.startAt || ''),
        field('States', String(w.status?.states ?? '')),
        field('Functions', (w.status?.functions || []).map((f) => {
          const [fn, fns] = f.split('.');
          return h('span', {class: 'chip'}, link(`/functions/function/${fns || ns}/${fn}`, f));
        }))),
      conditionsPanel(w),
      graphPanel(w.spec?.definition, null),
      yamlPanel(w),
    ],
    attach: () => [
      liveTable({
        title: 'Runs',
        informer: new Informer(collection(GV, 'workflowruns', ns), {labelSelector: `${WORKFLOW_LABEL}=${name}`}).start(signal),
        href: (r) => `/workflowruns/${r.metadata.namespace}/${r.metadata.name}`,
        empty: 'No runs.',
        columns: runColumns(false),
        order: newest,
      }),
      eventsPanel(signal, {ns, kind: 'Workflow', name}),
    ],
  });
}
