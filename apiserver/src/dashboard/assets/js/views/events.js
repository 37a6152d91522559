// Events of the chosen namespace (or all), newest first, as they are recorded.

import {h, replace} from '../dom.js';
import {pageHead, liveTable, watchList, eventColumns, newestEvents, namespace} from './common.js';

export function list(root, params, signal) {
  replace(root, pageHead('Events', h('span', {class: 'sub'}, namespace() || 'all namespaces')), liveTable({
    title: 'Events',
    id: 'events',
    informer: watchList('v1', 'events', signal),
    empty: 'No events.',
    columns: [...eventColumns(true), ...(namespace() ? [] : [['Namespace', (e) => e.metadata.namespace]])],
    order: newestEvents,
  }));
}
