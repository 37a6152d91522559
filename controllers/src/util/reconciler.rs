//! How every controller here reconciles, whatever drives it (a kube-runtime `Controller`, an
//! `applier` over merged key streams, or a key queue): one span per reconcile, one error type,
//! failures retried after a per-key exponential backoff (client-go's default controller rate
//! limiter: 5 ms doubling to 1000 s, reset by a success), and a panicking reconcile caught,
//! logged, counted and retried like a failure, as upstream's `HandleCrash` keeps a controller
//! running. Conflicts and a cache known to be behind are retried soon instead: the watch event
//! that settles them is on its way.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use minik8s_api::selector::SelectorError;
use tracing::Instrument;

use super::workqueue::QueueMetrics;

const BASE_DELAY: Duration = Duration::from_millis(5);
const MAX_DELAY: Duration = Duration::from_secs(1000);
/// After a conflict, or when the cache is known to lag a write of ours.
const SOON: Duration = Duration::from_millis(100);

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("invalid selector: {0}")]
    Selector(#[from] SelectorError),
    /// The cache has not caught up with a write this controller made; retried soon.
    #[error("cache is out of date: {0}")]
    Stale(String),
    #[error("{0}")]
    Failed(String),
    /// The reconcile panicked; the controller went on.
    #[error("reconcile panicked: {0}")]
    Panicked(String),
}

impl Error {
    pub fn failed(message: impl Into<String>) -> Self {
        Error::Failed(message.into())
    }

    /// Whether to retry soon rather than after the backoff.
    fn transient(&self) -> bool {
        match self {
            Error::Kube(kube::Error::Api(s)) => s.code == 409,
            Error::Stale(_) => true,
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Reconciles that panicked, by controller (`controller_reconcile_panics_total`), in the
/// controller-manager's registry.
static PANICS: LazyLock<prometheus::IntCounterVec> = LazyLock::new(|| {
    let c = prometheus::IntCounterVec::new(
        prometheus::Opts::new(
            "controller_reconcile_panics_total",
            "Reconciles that panicked, by controller",
        ),
        &["controller"],
    )
    .expect("metric");
    crate::metrics::register(crate::metrics::controller_manager(), &c);
    c
});

/// Panics caught in `controller`'s reconciles so far.
pub fn panics(controller: &str) -> u64 {
    PANICS.with_label_values(&[controller]).get()
}

/// Failures per key since its last success.
#[derive(Debug)]
pub struct Backoff<Key> {
    failures: Mutex<HashMap<Key, u32>>,
}

impl<Key> Default for Backoff<Key> {
    fn default() -> Self {
        Backoff {
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<Key: Hash + Eq + Clone> Backoff<Key> {
    /// The delay before retrying `key` after one more failure.
    pub fn failed(&self, key: &Key) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        BASE_DELAY
            .checked_mul(1u32 << (*n - 1).min(30))
            .unwrap_or(MAX_DELAY)
            .min(MAX_DELAY)
    }

    pub fn succeeded(&self, key: &Key) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// Runs one reconcile of `key` the shared way: in a span, a panic turned into
/// [`Error::Panicked`] (logged and counted).
pub async fn guarded<Fut>(controller: &'static str, key: String, work: Fut) -> Result<Action>
where
    Fut: Future<Output = Result<Action>>,
{
    let span = tracing::info_span!("reconcile", controller, object = %key);
    match AssertUnwindSafe(work.instrument(span)).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            PANICS.with_label_values(&[controller]).inc();
            tracing::error!(controller, object = %key, panic = %message, "reconcile panicked");
            Err(Error::Panicked(message))
        }
    }
}

/// What to do after a failed reconcile of `key`.
pub fn retry<Key: Hash + Eq + Clone + std::fmt::Display>(
    controller: &'static str,
    backoff: &Backoff<Key>,
    key: &Key,
    error: &Error,
) -> Action {
    Action::requeue(retry_after(controller, backoff, key, error))
}

/// How long after a failed reconcile of `key` it is tried again.
fn retry_after<Key: Hash + Eq + Clone + std::fmt::Display>(
    controller: &'static str,
    backoff: &Backoff<Key>,
    key: &Key,
    error: &Error,
) -> Duration {
    if error.transient() {
        tracing::debug!(controller, object = %key, %error, "retrying soon");
        return SOON;
    }
    let delay = backoff.failed(key);
    tracing::warn!(controller, object = %key, %error, ?delay, "reconcile failed");
    delay
}

/// The key a work queue knows an object by (client-go's `MetaNamespaceKeyFunc`).
pub fn queue_key<K: Resource>(r: &ObjectRef<K>) -> String {
    match &r.namespace {
        Some(ns) => format!("{ns}/{}", r.name),
        None => r.name.clone(),
    }
}

/// Marks a key done in its queue's metrics when the reconcile ends, finished or dropped.
struct Processing {
    queue: Arc<QueueMetrics>,
    key: String,
}

impl Drop for Processing {
    fn drop(&mut self) {
        self.queue.done(&self.key);
    }
}

/// The reconcile and error-policy functions kube-runtime's `applier` takes, built around
/// `reconcile` the shared way, with the work queue metrics of the controller's queue
/// (`name`, as upstream names it): a reconcile takes its key from the queue and a failure
/// is a retry, scheduled after its backoff. (A requeue the reconcile asks for is counted as
/// added when it is taken: kube-runtime's `Action` does not tell its delay.)
pub struct Reconciler<K: Resource, C, F> {
    name: &'static str,
    reconcile: F,
    backoff: Arc<Backoff<ObjectRef<K>>>,
    queue: Arc<QueueMetrics>,
    _ctx: std::marker::PhantomData<fn(C)>,
}

impl<K, C, F, Fut> Reconciler<K, C, F>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    ObjectRef<K>: Hash + Eq + Clone + std::fmt::Display,
    C: Send + Sync + 'static,
    F: FnMut(Arc<K>, Arc<C>) -> Fut,
    Fut: Future<Output = Result<Action>> + Send + 'static,
{
    pub fn new(name: &'static str, reconcile: F) -> Self {
        Reconciler {
            name,
            reconcile,
            backoff: Arc::default(),
            queue: QueueMetrics::new(name),
            _ctx: std::marker::PhantomData,
        }
    }

    /// The metrics of the controller's queue, for what adds keys to it.
    pub fn queue(&self) -> Arc<QueueMetrics> {
        self.queue.clone()
    }

    /// `(reconcile, error_policy)` for `applier`.
    #[allow(clippy::type_complexity)]
    pub fn split(
        self,
    ) -> (
        impl FnMut(Arc<K>, Arc<C>) -> BoxFuture<'static, Result<Action>>,
        impl Fn(Arc<K>, &Error, Arc<C>) -> Action,
    ) {
        let Reconciler {
            name,
            mut reconcile,
            backoff,
            queue,
            ..
        } = self;
        let on_success = backoff.clone();
        let requeues = queue.clone();
        let run = move |obj: Arc<K>, ctx: Arc<C>| {
            let key = ObjectRef::from_obj(obj.as_ref());
            let queued = queue_key(&key);
            requeues.get(&queued);
            let processing = Processing {
                queue: requeues.clone(),
                key: queued,
            };
            let work = reconcile(obj, ctx);
            let backoff = on_success.clone();
            async move {
                let result = guarded(name, key.to_string(), work).await;
                drop(processing);
                if result.is_ok() {
                    backoff.succeeded(&key);
                }
                result
            }
            .boxed()
        };
        let policy = move |obj: Arc<K>, error: &Error, _: Arc<C>| {
            let key = ObjectRef::from_obj(obj.as_ref());
            queue.retry();
            let delay = retry_after(name, &backoff, &key, error);
            queue.add_after(&queue_key(&key), delay);
            Action::requeue(delay)
        };
        (run, policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn backoff_doubles_per_key_and_resets_on_success() {
        let b: Backoff<String> = Backoff::default();
        let k = "a".to_string();
        assert_eq!(b.failed(&k), Duration::from_millis(5));
        assert_eq!(b.failed(&k), Duration::from_millis(10));
        assert_eq!(b.failed(&k), Duration::from_millis(20));
        assert_eq!(b.failed(&"b".to_string()), Duration::from_millis(5));
        b.succeeded(&k);
        assert_eq!(b.failed(&k), Duration::from_millis(5));
        for _ in 0..40 {
            b.failed(&k);
        }
        assert_eq!(b.failed(&k), MAX_DELAY);
    }

    #[tokio::test]
    async fn a_panicking_reconcile_is_an_error_and_counted() {
        let before = panics("test-panics");
        let (mut run, policy) = Reconciler::<ConfigMap, (), _>::new("test-panics", |_, _| async {
            let v: Vec<i32> = Vec::new();
            #[allow(clippy::indexing_slicing)]
            let x = v[1];
            Ok(Action::requeue(Duration::from_secs(x as u64)))
        })
        .split();
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("c".into());
        cm.metadata.namespace = Some("default".into());
        let cm = Arc::new(cm);
        let err = run(cm.clone(), Arc::new(())).await.unwrap_err();
        assert!(
            matches!(&err, Error::Panicked(m) if m.contains("index out of bounds")),
            "{err}"
        );
        assert_eq!(panics("test-panics"), before + 1);
        // Retried after the backoff, longer each time.
        let first = policy(cm.clone(), &err, Arc::new(()));
        let second = policy(cm.clone(), &err, Arc::new(()));
        assert_eq!(first, Action::requeue(Duration::from_millis(5)));
        assert_eq!(second, Action::requeue(Duration::from_millis(10)));
    }
}
