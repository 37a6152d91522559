// CPU and memory over time for nodes, pods and functions. From Prometheus when it runs (read
// through the API server's service proxy, with the user's credentials and RBAC), otherwise
// from the metrics API (metrics.k8s.io, what kubectl top reads), which keeps no history and
// has no watch: the page samples it every 15 s while it is open, the one request it repeats
// on a timer.

import {get, withQuery} from './api.js';
import {quantity} from './dom.js';

/** Prometheus's HTTP API behind the API server's service proxy. */
export const PROMETHEUS = '/api/v1/namespaces/monitoring/services/http:prometheus:9090/proxy';

export const SAMPLE_EVERY_MS = 15000;
/** How far back charts look. */
export const WINDOW_MS = 30 * 60 * 1000;

/** Samples of the metrics API: `node:<name>` and `pod:<ns>/<name>` → [[ms, cores, bytes]]. */
class Sampler {
  constructor() {
    this.series = new Map();
    this.nodes = new Map();
    this.pods = new Map();
    this.error = null;
    this.sampledAt = 0;
    this.listeners = new Set();
    this.timer = null;
  }

  subscribe(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  start() {
    if (this.timer) return;
    this.sample();
    this.timer = setInterval(() => this.sample(), SAMPLE_EVERY_MS);
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
    this.series.clear();
  }

  async sample() {
    const at = Date.now();
    const [nodes, pods] = await Promise.allSettled([
      get('/apis/metrics.k8s.io/v1beta1/nodes'),
      get('/apis/metrics.k8s.io/v1beta1/pods'),
    ]);
    this.error = nodes.status === 'rejected' ? nodes.reason : null;
    if (nodes.status === 'fulfilled') {
      this.nodes = new Map();
      for (const m of nodes.value.items || []) {
        const usage = {cpu: quantity(m.usage?.cpu), memory: quantity(m.usage?.memory)};
        this.nodes.set(m.metadata.name, usage);
        this.push(`node:${m.metadata.name}`, at, usage);
      }
    }
    if (pods.status === 'fulfilled') {
      this.pods = new Map();
      for (const m of pods.value.items || []) {
        const usage = {cpu: 0, memory: 0};
        for (const c of m.containers || []) {
          usage.cpu += quantity(c.usage?.cpu) || 0;
          usage.memory += quantity(c.usage?.memory) || 0;
        }
        const k = `${m.metadata.namespace}/${m.metadata.name}`;
        this.pods.set(k, usage);
        this.push(`pod:${k}`, at, usage);
      }
    }
    this.sampledAt = at;
    for (const fn of this.listeners) fn(this);
  }

  push(k, at, usage) {
    const points = this.series.get(k) || [];
    points.push([at, usage.cpu, usage.memory]);
    while (points.length && points[0][0] < at - 2 * WINDOW_MS) points.shift();
    this.series.set(k, points);
  }

  /** The sum of the series named by `keys`, per sampling round. */
  sum(keys) {
    const byTime = new Map();
    for (const k of keys) {
      for (const [t, c, m] of this.series.get(k) || []) {
        const acc = byTime.get(t) || [t, 0, 0];
        acc[1] += c;
        acc[2] += m;
        byTime.set(t, acc);
      }
    }
    const rounds = [...byTime.values()].sort((a, b) => a[0] - b[0]);
    return {cpu: rounds.map(([t, c]) => [t, c]), memory: rounds.map(([t, , m]) => [t, m])};
  }
}

export const sampler = new Sampler();

let probe = {at: 0, up: false};

/** Whether Prometheus answers through the proxy (remembered for a minute). */
export async function prometheusUp() {
  if (Date.now() - probe.at < 60000) return probe.up;
  let up = false;
  try {
    up = (await get(`${PROMETHEUS}/api/v1/query?query=1`))?.status === 'success';
  } catch {
    up = false; // 404 or 503 when it is not installed or not running; 403 when not allowed
  }
  probe = {at: Date.now(), up};
  return up;
}

async function range(query) {
  const end = Date.now() / 1000;
  const r = await get(withQuery(`${PROMETHEUS}/api/v1/query_range`, {
    query, start: (end - WINDOW_MS / 1000).toFixed(3), end: end.toFixed(3), step: '15',
  }));
  return (r?.data?.result || []).map((s) => ({
    metric: s.metric || {},
    points: (s.values || []).map(([t, v]) => [t * 1000, parseFloat(v)]),
  }));
}

const quote = (v) => JSON.stringify(String(v));
const regexEscape = (v) => v.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The node's series: whichever label (node, instance, hostname) holds its name. */
function ofNode(result, name) {
  const named = result.find((s) => Object.values(s.metric).some((v) => v === name || v.startsWith(`${name}:`)));
  return named || (result.length === 1 ? result[0] : null);
}

function promQueries(target) {
  const containers = (sel) => `{${sel},container!="",container!="POD"}`;
  switch (target.kind) {
    // cAdvisor's root container (`id="/"`) is the whole node, as kubernetes-mixin reads it.
    case 'cluster':
      return {
        cpu: 'sum(rate(container_cpu_usage_seconds_total{id="/"}[1m]))',
        memory: 'sum(container_memory_working_set_bytes{id="/"})',
      };
    case 'node':
      return {
        cpu: 'sum by (node, instance) (rate(container_cpu_usage_seconds_total{id="/"}[1m]))',
        memory: 'sum by (node, instance) (container_memory_working_set_bytes{id="/"})',
      };
    case 'pods': {
      const pods = target.pods.map((p) => regexEscape(p)).join('|') || '$^';
      const sel = containers(`namespace=${quote(target.namespace)},pod=~${quote(pods)}`);
      // The same containers may be scraped twice (cAdvisor and the resource endpoint):
      // sum per scrape job, then take one.
      return {
        cpu: `max(sum by (job, metrics_path) (rate(container_cpu_usage_seconds_total${sel}[1m])))`,
        memory: `max(sum by (job, metrics_path) (container_memory_working_set_bytes${sel}))`,
      };
    }
    default:
      throw new Error(`no queries for ${target.kind}`);
  }
}

function sampled(target) {
  switch (target.kind) {
    case 'cluster':
      return sampler.sum([...sampler.series.keys()].filter((k) => k.startsWith('node:')));
    case 'node':
      return sampler.sum([`node:${target.name}`]);
    case 'pods':
      return sampler.sum(target.pods.map((p) => `pod:${target.namespace}/${p}`));
    default:
      return {cpu: [], memory: []};
  }
}

/**
 * CPU (cores) and memory (bytes) over the last half hour of `target`: `{kind: 'cluster'}`,
 * `{kind: 'node', name}` or `{kind: 'pods', namespace, pods: [names]}` (summed).
 * Answers `{source, cpu: [[ms, v]], memory: [[ms, v]]}`.
 */
export async function usage(target) {
  if (await prometheusUp()) {
    try {
      const q = promQueries(target);
      const [cpu, memory] = await Promise.all([range(q.cpu), range(q.memory)]);
      const pick = (r) => (target.kind === 'node' ? ofNode(r, target.name) : r[0]);
      const c = pick(cpu);
      const m = pick(memory);
      if (c?.points.length || m?.points.length) {
        return {source: 'prometheus', cpu: c?.points || [], memory: m?.points || []};
      }
    } catch {
      // Prometheus went away or cannot answer: the metrics API's samples below
    }
  }
  return {source: 'metrics-api', ...sampled(target)};
}
