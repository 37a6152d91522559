// The page's frame: who the user is (a SelfSubjectReview with the token from the login
// form, or with the browser's client certificate and no token), the navigation, the
// namespace the lists show, and which view draws the main area for the URL's hash. Each
// view gets an AbortSignal that ends its watches and timers when the user navigates away.

import {whoami, setToken, token, Informer} from './api.js';
import {h, replace, errorBox} from './dom.js';
import {sampler} from './metrics.js';
import {namespace, setNamespace} from './views/common.js';
import * as overview from './views/overview.js';
import * as nodes from './views/nodes.js';
import * as namespaces from './views/namespaces.js';
import * as workloads from './views/workloads.js';
import * as pods from './views/pods.js';
import * as services from './views/services.js';
import * as functions from './views/functions.js';
import * as workflows from './views/workflows.js';
import * as events from './views/events.js';

const ROUTES = [
  ['/', overview.render],
  ['/nodes', nodes.list],
  ['/nodes/:name', nodes.detail],
  ['/namespaces', namespaces.list],
  ['/namespaces/:name', namespaces.detail],
  ['/workloads', workloads.list],
  ['/workloads/:resource/:ns/:name', workloads.detail],
  ['/pods', pods.list],
  ['/pods/:ns/:name', pods.detail],
  ['/services', services.list],
  ['/services/:ns/:name', services.detail],
  ['/functions', functions.list],
  ['/functions/function/:ns/:name', functions.functionDetail],
  ['/functions/ksvc/:ns/:name', functions.serviceDetail],
  ['/workflows', workflows.list],
  ['/workflows/:ns/:name', workflows.workflowDetail],
  ['/workflowruns/:ns/:name', workflows.runDetail],
  ['/events', events.list],
];

const NAV = [
  ['/', 'Overview'], ['/nodes', 'Nodes'], ['/namespaces', 'Namespaces'], ['/workloads', 'Workloads'],
  ['/pods', 'Pods'], ['/services', 'Services'], ['/functions', 'Functions'], ['/workflows', 'Workflows'],
  ['/events', 'Events'],
];

/** The view for `path` and the parameters its pattern names. */
function match(path) {
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  for (const [pattern, view] of ROUTES) {
    const want = pattern.split('/').filter(Boolean);
    if (want.length !== parts.length) continue;
    const params = {};
    if (want.every((w, i) => (w.startsWith(':') ? ((params[w.slice(1)] = parts[i]), true) : w === parts[i]))) {
      return {view, params};
    }
  }
  return null;
}

const app = document.getElementById('app');
let current = null;

function path() {
  return location.hash.replace(/^#/, '') || '/';
}

function navigate(main, nav) {
  current?.abort();
  current = new AbortController();
  const p = path();
  const section = p === '/' ? '/' : `/${p.split('/')[1] === 'workflowruns' ? 'workflows' : p.split('/')[1]}`;
  for (const a of nav.querySelectorAll('a')) a.classList.toggle('active', a.dataset.section === section);
  const found = match(p);
  window.scrollTo(0, 0);
  if (!found) {
    replace(main, h('header', {class: 'page-head'}, h('h1', null, 'Not found')), h('p', null, `Nothing at ${p}.`));
    return;
  }
  try {
    found.view(main, found.params, current.signal);
  } catch (e) {
    replace(main, errorBox(e));
    throw e;
  }
}

/** The namespace picker: every namespace the user may list, kept current by a watch. */
function namespacePicker(signal, onChange) {
  const select = h('select', {id: 'namespace', 'aria-label': 'namespace'});
  const inf = new Informer('/api/v1/namespaces').start(signal);
  inf.subscribe(() => {
    const chosen = namespace();
    const names = [...inf.items.keys()].sort();
    if (chosen && !names.includes(chosen)) names.unshift(chosen);
    replace(select, h('option', {value: ''}, 'All namespaces'),
      names.map((n) => h('option', {value: n, selected: n === chosen}, n)));
    select.value = chosen;
  });
  select.addEventListener('change', () => {
    setNamespace(select.value);
    onChange();
  });
  return h('label', {class: 'ns-picker'}, 'Namespace ', select);
}

function shell(user) {
  const session = new AbortController();
  const main = h('main', {id: 'main'});
  const nav = h('nav', {class: 'sidebar'},
    h('div', {class: 'links'}, NAV.map(([p, label]) => h('a', {href: `#${p}`, 'data-section': p}, label))));
  const signOut = h('button', {type: 'button', class: 'small', id: 'sign-out'}, 'Sign out');
  signOut.addEventListener('click', () => {
    session.abort();
    current?.abort();
    sampler.stop();
    setToken(null);
    window.removeEventListener('hashchange', onHash);
    login();
  });
  const onHash = () => navigate(main, nav);
  replace(app, h('div', {class: 'shell'},
    h('header', {class: 'topbar'},
      h('a', {class: 'brand', href: '#/'}, h('img', {src: 'favicon.svg', alt: ''}), 'minik8s'),
      namespacePicker(session.signal, onHash),
      h('span', {class: 'spacer'}),
      h('span', {class: 'user', id: 'user', title: (user.groups || []).join(', ')}, user.username || 'unknown'),
      token() ? signOut : null),
    nav, main));
  window.addEventListener('hashchange', onHash);
  sampler.start();
  navigate(main, nav);
}

function login(message) {
  const input = h('textarea', {id: 'token', rows: 4, autocomplete: 'off', spellcheck: 'false', placeholder: 'eyJhbGciOi…'});
  const error = h('div', {class: 'error', id: 'login-error', role: 'alert', hidden: !message}, message || '');
  const form = h('form', {class: 'login', id: 'login'},
    h('h1', null, h('img', {src: 'favicon.svg', alt: ''}), 'minik8s dashboard'),
    h('p', null, 'Sign in with a bearer token: what you see is what that token may read.'),
    h('label', {for: 'token'}, 'Token'), input,
    h('button', {type: 'submit', id: 'sign-in'}, 'Sign in'),
    error,
    h('details', null, h('summary', null, 'Getting a token'),
      h('p', null, 'A read-only ServiceAccount for the dashboard, and a token for it:'),
      h('pre', null, 'kubectl get --raw /dashboard/rbac.yaml | kubectl apply -f -\nkubectl -n kube-system create token minik8s-dashboard --duration 24h'),
      h('p', null, 'A browser that holds the kubeconfig\'s client certificate is signed in without a token. The token stays in this tab only (sessionStorage).')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    setToken(value);
    error.hidden = true;
    try {
      const user = await whoami();
      if (!user.username || user.username === 'system:anonymous') throw new Error('anonymous');
      shell(user);
    } catch (e) {
      setToken(null);
      error.textContent = e.status === 401 ? 'The server did not accept this token (401 Unauthorized).' : `Sign-in failed: ${e.message}`;
      error.hidden = false;
    }
  });
  replace(app, h('div', {class: 'login-page'}, form));
  input.focus();
}

async function boot() {
  try {
    const user = await whoami();
    if (user.username && user.username !== 'system:anonymous') {
      shell(user);
      return;
    }
  } catch (e) {
    if (token() && e.status === 401) {
      setToken(null);
      login('The token was not accepted any more; sign in again.');
      return;
    }
  }
  login();
}

boot();
