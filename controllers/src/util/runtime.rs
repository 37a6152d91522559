//! The informer-and-workqueue shape of upstream controllers: the shared informers' changes
//! (which come after the cache holds them, so a reconcile never reads a cache older than its
//! trigger) become keys on a queue. A controller that reads two caches (a Job and its pods)
//! merges the key streams of both into one `applier`, which deduplicates keys and runs one
//! reconcile per key at a time.

use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;

use super::reconciler::{Error, Reconciler};
use crate::informers::Cache;

/// Runs `reconcile` for every key of `queue` whose object is in `store`, until the queue ends,
/// the way every controller reconciles (see [`Reconciler`]).
pub async fn run<K, Ctx, Fut>(
    name: &'static str,
    store: Cache<K>,
    queue: impl Stream<Item = ObjectRef<K>> + Send + 'static,
    reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut,
    ctx: Arc<Ctx>,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    ObjectRef<K>: Hash + Eq,
    Ctx: Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let queue = queue.map(Ok::<_, Infallible>);
    let (reconcile, error_policy) = Reconciler::new(name, reconcile).split();
    controller::applier(
        reconcile,
        error_policy,
        ctx,
        store.kube_store(),
        Box::pin(queue),
        controller::Config::default(),
    )
    .for_each(|_| async {})
    .await
}
