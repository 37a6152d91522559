//! The informer-and-workqueue shape of upstream controllers on kube-runtime's stable API: a
//! watch feeds a reflector cache, and only after the cache holds an event does the event turn
//! into a key on the queue, so a reconcile never reads a cache older than its trigger. A
//! controller that reads two caches (a Job and its pods) merges the key streams of both into
//! one `applier`, which deduplicates keys and runs one reconcile per key at a time.

use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tracing::Instrument;

/// Watches `api` into `writer`'s cache and yields every object added, changed or deleted, after
/// the cache has it. `on_event` sees each event before the cache applies it (expectations
/// count creations against the cache as it was).
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> impl Stream<Item = K> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let events = watcher::watcher(api, config)
        .default_backoff()
        .map_ok(move |e| {
            on_event(&e);
            e
        });
    reflector::reflector(writer, events)
        .touched_objects()
        .filter_map(|r| async move { r.map_err(|e| tracing::warn!(error = %e, "watch")).ok() })
}

/// Runs `reconcile` for every key of `queue` whose object is in `store`, until the queue ends.
/// Errors requeue the key after `retry`.
pub async fn run<K, Ctx, Fut, E>(
    name: &'static str,
    store: Store<K>,
    queue: impl Stream<Item = ObjectRef<K>> + Send + 'static,
    mut reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut,
    ctx: Arc<Ctx>,
    retry: Duration,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    ObjectRef<K>: Hash + Eq,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let queue = queue.map(Ok::<_, Infallible>);
    controller::applier(
        move |obj: Arc<K>, ctx| {
            let span = tracing::info_span!("reconcile", controller = name, object = %ObjectRef::from_obj(obj.as_ref()));
            Box::pin(reconcile(obj, ctx).instrument(span))
        },
        move |obj: Arc<K>, e: &E, _| {
            tracing::warn!(controller = name, object = %ObjectRef::from_obj(obj.as_ref()), error = %e, "reconcile failed");
            Action::requeue(retry)
        },
        ctx,
        store,
        Box::pin(queue),
        controller::Config::default(),
    )
    .for_each(|_| async {})
    .await
}

/// A fresh cache and its writer.
pub fn cache<K>() -> (Store<K>, Writer<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    reflector::store()
}
