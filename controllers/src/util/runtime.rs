//! The informer-and-workqueue shape of upstream controllers: the shared informers' changes
//! (which come after the cache holds them, so a reconcile never reads a cache older than its
//! trigger) become keys on a queue. A controller that reads two caches (a Job and its pods)
//! merges the key streams of both into one `applier`, which deduplicates keys and runs one
//! reconcile per key at a time.
//!
//! Every controller runs through one applier, whether it hands over its key stream itself
//! ([`run`]) or builds it with [`Controller`] (kube-runtime's builder, with the same
//! methods): the keys pass by the queue's metrics on their way in, so every controller has
//! upstream's `workqueue_*` series. [`Controller::run`] runs each reconcile in a task of its
//! own, as kube-runtime's `Controller::run` spawns them; [`run`] polls them in its own task.

use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use kube::Resource;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};

use super::reconciler::{Error, Reconciler, queue_key};
use crate::informers::Cache;

/// Runs `reconcile` for every key of `queue` whose object is in `store`, until the queue ends,
/// the way every controller reconciles (see [`Reconciler`]); `name` is the queue's, as
/// upstream names it.
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
    run_on(name, store.kube_store(), queue, reconcile, ctx, false).await
}

/// The applier of every controller; `spawn`: each reconcile in a task of its own.
async fn run_on<K, Ctx, Fut>(
    name: &'static str,
    store: Store<K>,
    queue: impl Stream<Item = ObjectRef<K>> + Send + 'static,
    reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut,
    ctx: Arc<Ctx>,
    spawn: bool,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    ObjectRef<K>: Hash + Eq,
    Ctx: Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let reconciler = Reconciler::new(name, reconcile);
    let metrics = reconciler.queue();
    let added = metrics.clone();
    let queue = queue
        .inspect(move |key| added.add(&queue_key(key)))
        .map(Ok::<_, Infallible>);
    let (mut reconcile, error_policy) = reconciler.split();
    let spawned = move |obj: Arc<K>, ctx: Arc<Ctx>| {
        let work = reconcile(obj, ctx);
        if spawn {
            Spawned::Task(tokio::spawn(work))
        } else {
            Spawned::Here(work)
        }
    };
    controller::applier(
        spawned,
        error_policy,
        ctx,
        store,
        Box::pin(queue),
        controller::Config::default(),
    )
    .for_each(|result| {
        // A key whose object left the cache before its turn is taken and done at once, as
        // upstream's worker syncs a key whose object is gone.
        if let Err(controller::Error::ObjectNotFound(gone)) = result {
            let key = match &gone.namespace {
                Some(ns) => format!("{ns}/{}", gone.name),
                None => gone.name.clone(),
            };
            metrics.get(&key);
            metrics.done(&key);
        }
        async {}
    })
    .await
}

/// A reconcile polled by the applier, or in a task of its own (aborted when dropped: the
/// controller stopping).
enum Spawned {
    Here(futures::future::BoxFuture<'static, Result<Action, Error>>),
    Task(tokio::task::JoinHandle<Result<Action, Error>>),
}

impl Future for Spawned {
    type Output = Result<Action, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut *self {
            Spawned::Here(work) => work.poll_unpin(cx),
            Spawned::Task(task) => task.poll_unpin(cx).map(|joined| {
                joined.unwrap_or_else(|e| Err(Error::failed(format!("reconcile task ended: {e}"))))
            }),
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Spawned::Task(task) = self {
            task.abort();
        }
    }
}

/// kube-runtime's `Controller` builder over shared streams, with its methods and meaning:
/// each trigger becomes keys of the controller's queue, which [`Controller::run`] reconciles
/// through [`run`].
pub struct Controller<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    triggers: Vec<BoxStream<'static, ObjectRef<K>>>,
}

impl<K> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    ObjectRef<K>: Hash + Eq,
{
    /// Reconciles each object `trigger` yields, read from `reader` when its turn comes.
    pub fn for_shared_stream(
        trigger: impl Stream<Item = Arc<K>> + Send + 'static,
        reader: Store<K>,
    ) -> Self {
        Controller {
            store: reader,
            triggers: vec![trigger.map(|o| ObjectRef::from_obj(o.as_ref())).boxed()],
        }
    }

    /// Reconciles the objects `mapper` names for each object of another kind `trigger`
    /// yields.
    pub fn watches_shared_stream<Other, I>(
        mut self,
        trigger: impl Stream<Item = Arc<Other>> + Send + 'static,
        mapper: impl Fn(Arc<Other>) -> I + Send + Sync + 'static,
    ) -> Self
    where
        Other: Send + Sync + 'static,
        I: IntoIterator<Item = ObjectRef<K>>,
        I::IntoIter: Send + 'static,
    {
        self.triggers.push(
            trigger
                .flat_map(move |o| futures::stream::iter(mapper(o)))
                .boxed(),
        );
        self
    }

    /// Reconciles every object of the cache each time `trigger` yields.
    pub fn reconcile_all_on(mut self, trigger: impl Stream<Item = ()> + Send + 'static) -> Self {
        let store = self.store.clone();
        self.triggers.push(
            trigger
                .flat_map(move |()| {
                    futures::stream::iter(
                        store
                            .state()
                            .into_iter()
                            .map(|o| ObjectRef::from_obj(o.as_ref())),
                    )
                })
                .boxed(),
        );
        self
    }

    /// Reconciles the objects `trigger` names.
    pub fn reconcile_on(
        mut self,
        trigger: impl Stream<Item = ObjectRef<K>> + Send + 'static,
    ) -> Self {
        self.triggers.push(trigger.boxed());
        self
    }

    /// Reconciles until every trigger ends, with the queue named `name` (as upstream names
    /// the controller's queue).
    pub async fn run<Ctx, Fut>(
        self,
        name: &'static str,
        reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut,
        ctx: Arc<Ctx>,
    ) where
        Ctx: Send + Sync + 'static,
        Fut: Future<Output = Result<Action, Error>> + Send + 'static,
    {
        let queue = futures::stream::select_all(self.triggers);
        run_on(name, self.store, queue, reconcile, ctx, true).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn cm(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("default".into());
        cm
    }

    fn series(name: &str, queue: &str) -> f64 {
        let text = crate::metrics::render(crate::metrics::controller_manager());
        let prefix = format!("{name}{{name=\"{queue}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0.0, |v| v.parse().unwrap())
    }

    #[tokio::test]
    async fn triggers_of_every_kind_reach_the_queue_and_its_metrics() {
        let mut writer: Writer<ConfigMap> = Writer::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(cm("a")));
        writer.apply_watcher_event(&Event::InitApply(cm("b")));
        writer.apply_watcher_event(&Event::InitDone);
        let (objects, objects_rx) = futures::channel::mpsc::unbounded::<Arc<ConfigMap>>();
        let (all, all_rx) = futures::channel::mpsc::unbounded::<()>();
        let seen = Arc::new(AtomicUsize::new(0));
        let controller = Controller::for_shared_stream(objects_rx, store.clone())
            .reconcile_all_on(all_rx)
            .reconcile_on(futures::stream::iter([
                ObjectRef::<ConfigMap>::new("gone").within("default")
            ]));
        let counted = seen.clone();
        let task = tokio::spawn(controller.run(
            "test_controller_triggers",
            move |_: Arc<ConfigMap>, _: Arc<()>| {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(Action::await_change())
                }
            },
            Arc::new(()),
        ));
        objects.unbounded_send(Arc::new(cm("a"))).unwrap();
        testkit::eventually(
            std::time::Duration::from_secs(10),
            "the object to be reconciled",
            || async { (seen.load(Ordering::SeqCst) >= 1).then_some(()) },
        )
        .await;
        all.unbounded_send(()).unwrap();
        testkit::eventually(
            std::time::Duration::from_secs(10),
            "every object to be reconciled",
            || async { (seen.load(Ordering::SeqCst) >= 3).then_some(()) },
        )
        .await;
        testkit::eventually(
            std::time::Duration::from_secs(10),
            "the work to be observed",
            || async {
                (series(
                    "workqueue_work_duration_seconds_count",
                    "test_controller_triggers",
                ) >= 3.0)
                    .then_some(())
            },
        )
        .await;
        // The key of a missing object was added and taken too.
        assert!(series("workqueue_adds_total", "test_controller_triggers") >= 4.0);
        assert!(
            series(
                "workqueue_queue_duration_seconds_count",
                "test_controller_triggers"
            ) >= 4.0
        );
        assert_eq!(series("workqueue_depth", "test_controller_triggers"), 0.0);
        task.abort();
    }

    #[tokio::test]
    async fn failures_are_retries_and_requeues_come_back() {
        let mut writer: Writer<ConfigMap> = Writer::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(cm("a")));
        writer.apply_watcher_event(&Event::InitDone);
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let task = tokio::spawn(
            Controller::for_shared_stream(
                futures::stream::iter([Arc::new(cm("a"))]).chain(futures::stream::pending()),
                store,
            )
            .run(
                "test_controller_retries",
                move |_: Arc<ConfigMap>, _: Arc<()>| {
                    let n = counted.fetch_add(1, Ordering::SeqCst);
                    async move {
                        match n {
                            0 => Err(Error::failed("once")),
                            1 => Ok(Action::requeue(std::time::Duration::from_millis(10))),
                            _ => Ok(Action::await_change()),
                        }
                    }
                },
                Arc::new(()),
            ),
        );
        testkit::eventually(
            std::time::Duration::from_secs(10),
            "the retry and the requeue",
            || async { (runs.load(Ordering::SeqCst) >= 3).then_some(()) },
        )
        .await;
        assert_eq!(
            series("workqueue_retries_total", "test_controller_retries"),
            1.0
        );
        testkit::eventually(
            std::time::Duration::from_secs(10),
            "the third reconcile to be observed",
            || async {
                (series(
                    "workqueue_work_duration_seconds_count",
                    "test_controller_retries",
                ) >= 3.0)
                    .then_some(())
            },
        )
        .await;
        assert_eq!(
            series("workqueue_adds_total", "test_controller_retries"),
            3.0
        );
        task.abort();
    }
}
