// The API as the page reads it: requests with the user's credentials, and informers that list
// once and then follow a watch (JSON lines read from a fetch stream) from the list's
// resourceVersion, relisting only when the server says the version is gone (410), as
// client-go's reflector does. Nothing here polls.

const TOKEN_KEY = 'minik8s-dashboard-token';

/** The bearer token the user signed in with, if any (a client certificate needs none). */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value.trim());
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An API failure, with the Status the server answered when it sent one. */
export class ApiError extends Error {
  constructor(status, body) {
    const message = body?.message || `${status} ${body?.reason || 'request failed'}`;
    super(message);
    this.status = status;
    this.reason = body?.reason;
  }
}

function headers(extra) {
  const h = {Accept: 'application/json', ...extra};
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

async function failure(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch {
    // not a Status: the code alone says what happened
  }
  return new ApiError(resp.status, body);
}

/** GET (or another method with a JSON body) that answers the decoded JSON. */
export async function request(path, {method = 'GET', body, signal} = {}) {
  const init = {method, signal, headers: headers(body ? {'Content-Type': 'application/json'} : {})};
  if (body) init.body = JSON.stringify(body);
  const resp = await fetch(path, init);
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

export const get = (path, signal) => request(path, {signal});

/** Who the server takes the user for (a SelfSubjectReview), or the error it answered. */
export async function whoami() {
  const review = await request('/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    method: 'POST',
    body: {apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview'},
  });
  return review.status?.userInfo || {};
}

/** `path` with `params` (those not null) added to its query. */
export function withQuery(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== '') q.set(k, v);
  const s = q.toString();
  if (!s) return path;
  return `${path}${path.includes('?') ? '&' : '?'}${s}`;
}

/** The lines of a streamed response body, as they arrive. */
export async function* lines(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, {stream: true});
      let nl;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        yield buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
      }
    }
    buffered += decoder.decode();
    if (buffered) yield buffered;
  } finally {
    reader.releaseLock();
  }
}

/** Text chunks of a streamed response body (a followed log), as they arrive. */
export async function* chunks(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      yield decoder.decode(value, {stream: true});
    }
  } finally {
    reader.releaseLock();
  }
}

/** A streaming GET (watch, follow): the response once its headers arrived. */
export async function stream(path, signal) {
  const resp = await fetch(path, {headers: headers(), signal});
  if (!resp.ok) throw await failure(resp);
  return resp;
}

const wait = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
});

function objectKey(o) {
  const m = o.metadata || {};
  return m.namespace ? `${m.namespace}/${m.name}` : m.name;
}

/**
 * A list kept current by a watch: `path` is a collection (`/api/v1/pods`), `query` its
 * selectors. Subscribers get the items after every batch of events (coalesced per task), and
 * `state` says whether the watch is live ('live'), (re)listing ('syncing') or failing
 * ('error', with `error`). Stops when `signal` aborts.
 */
export class Informer {
  constructor(path, query = {}) {
    this.path = path;
    this.query = query;
    this.items = new Map();
    this.synced = false;
    this.state = 'syncing';
    this.error = null;
    this.listeners = new Set();
    this.pending = false;
  }

  subscribe(fn) {
    this.listeners.add(fn);
    if (this.synced || this.error) fn(this);
    return () => this.listeners.delete(fn);
  }

  /** Items sorted by namespace, then name. */
  list() {
    return [...this.items.values()].sort((a, b) => objectKey(a).localeCompare(objectKey(b)));
  }

  notify() {
    if (this.pending) return;
    this.pending = true;
    setTimeout(() => {
      this.pending = false;
      for (const fn of this.listeners) fn(this);
    }, 0);
  }

  start(signal) {
    this.run(signal);
    return this;
  }

  async run(signal) {
    let backoff = 500;
    while (!signal.aborted) {
      try {
        this.state = 'syncing';
        const list = await get(withQuery(this.path, this.query), signal);
        this.items = new Map((list.items || []).map((o) => [objectKey(o), o]));
        this.synced = true;
        this.error = null;
        let rv = list.metadata?.resourceVersion;
        this.state = 'live';
        this.notify();
        backoff = 500;
        // Watch until the server ends the stream (its timeout) or the version is gone.
        let gone = false;
        while (!signal.aborted && !gone) {
          const resp = await stream(withQuery(this.path, {
            ...this.query, watch: '1', resourceVersion: rv, allowWatchBookmarks: 'true',
          }), signal);
          this.state = 'live';
          const opened = Date.now();
          for await (const line of lines(resp)) {
            if (!line.trim()) continue;
            const ev = JSON.parse(line);
            const o = ev.object || {};
            if (ev.type === 'ERROR') {
              if (o.code === 410) { gone = true; break; }
              throw new ApiError(o.code || 500, o);
            }
            rv = o.metadata?.resourceVersion || rv;
            if (ev.type === 'BOOKMARK') continue;
            if (ev.type === 'DELETED') this.items.delete(objectKey(o));
            else this.items.set(objectKey(o), o);
            this.notify();
          }
          // A stream the server ends at once (it is shutting down) is not retried in a loop.
          if (!gone && Date.now() - opened < 1000) await wait(1000, signal);
        }
      } catch (e) {
        if (signal.aborted) return;
        this.error = e;
        this.state = 'error';
        this.notify();
        // Not allowed or not served: retrying will not change the answer soon.
        if (e.status === 401 || e.status === 403 || e.status === 404) backoff = 30000;
        await wait(backoff, signal);
        backoff = Math.min(backoff * 2, 30000);
      }
    }
  }
}

/** Watches one object (a field selector on its name); `items` holds it while it exists. */
export function objectInformer(collection, name) {
  return new Informer(collection, {fieldSelector: `metadata.name=${name}`});
}

/** The collection path of a resource: `/api/v1/namespaces/ns/pods` or `/apis/apps/v1/deployments`. */
export function collection(groupVersion, resource, namespace) {
  const root = groupVersion.includes('/') ? `/apis/${groupVersion}` : `/api/${groupVersion}`;
  return namespace ? `${root}/namespaces/${encodeURIComponent(namespace)}/${resource}` : `${root}/${resource}`;
}
