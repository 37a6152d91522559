//! One watch and one cache per kind per process, shared by every component running in it (the
//! scheduler, the controllers, the proxier, cluster DNS and the Ingress proxy): upstream's
//! SharedInformerFactory. At 30,000 pods a cache of all pods is hundreds of MiB, and each
//! controller used to keep its own; `minik8s server` also cached every Service and
//! EndpointSlice once for the controllers and again for each of the proxier, DNS and Ingress.
//! A crate of its own so that the proxy (and the kubelet) share it without depending on the
//! controllers.
//!
//! An informer lists and watches its kind into a [`Store`], then tells every subscriber what
//! changed, after the cache holds the change: [`Change::Applied`] with the object as the cache
//! held it before (so "is this pod new to the cache" is answered without a second cache), and
//! [`Change::Deleted`]. A relist (the start, or a watch that could not resume) is turned into
//! the changes it makes, as upstream's `Replace`, then [`Change::Synced`]. Each subscriber has a
//! queue of its own and misses nothing, however slow.
//!
//! Objects are cached without their managedFields (upstream's TransformStripManagedFields).
//!
//! Beside the cache, an informer indexes its objects by controller (upstream's
//! `PodControllerUIDIndex`): a ReplicaSet's sync reads its own pods and the orphans of its
//! namespace instead of scanning every pod, which at 30,000 pods was a third of the server's
//! CPU during a storm.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, RwLock};

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

/// The controller reference of `obj`, if any.
pub fn controller_of(obj: &impl Resource) -> Option<&OwnerReference> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Every subscriber's queue of changes, unbounded, as upstream's `processorListener` buffer
/// grows: a subscriber that is slow for a while catches up instead of rescanning the whole
/// cache. With one shared buffer of 2,048 changes, a storm at 150,000 pods made subscribers
/// fall behind hundreds of times a minute, and each time a controller walked every pod.
struct Subscribers<K>(Arc<Mutex<Vec<mpsc::UnboundedSender<Change<K>>>>>);

impl<K> Clone for Subscribers<K> {
    fn clone(&self) -> Self {
        Subscribers(self.0.clone())
    }
}

impl<K> Subscribers<K> {
    fn new() -> Self {
        Subscribers(Arc::default())
    }

    fn subscribe(&self) -> mpsc::UnboundedReceiver<Change<K>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.0.lock().expect("subscribers").push(tx);
        rx
    }

    /// Queues `change` for every subscriber still there (none yet is fine: they start from
    /// the cache).
    fn send(&self, change: Change<K>) {
        self.0
            .lock()
            .expect("subscribers")
            .retain(|tx| tx.send(change.clone()).is_ok());
    }
}

/// A change of the shared cache of one kind.
#[derive(Debug)]
pub enum Change<K> {
    /// Added or updated; `previous` is what the cache held before (`None`: new to it).
    Applied {
        object: Arc<K>,
        previous: Option<Arc<K>>,
    },
    /// Gone, as last seen.
    Deleted(Arc<K>),
    /// The cache holds a complete list (after the first list or a relist): look at all of it.
    Synced,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Applied { object, previous } => Change::Applied {
                object: object.clone(),
                previous: previous.clone(),
            },
            Change::Deleted(o) => Change::Deleted(o.clone()),
            Change::Synced => Change::Synced,
        }
    }
}

impl<K> Change<K> {
    /// The object an `Applied` or `Deleted` change is about.
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            Change::Applied { object, .. } | Change::Deleted(object) => Some(object),
            Change::Synced => None,
        }
    }
}

/// The shared cache of one kind: kube's [`Store`] with a readiness every holder may wait on.
/// The store's own `wait_until_ready` wakes only the task that polled it last (a oneshot
/// channel underneath), so two components waiting on one shared store left the first asleep
/// until something else polled it: a node's proxier waited five minutes for its first sync
/// once the Ingress proxy shared its caches. Its `wait_until_ready` is shadowed here.
pub struct Cache<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    ready: watch::Receiver<bool>,
}

impl<K: Resource<DynamicType = ()> + 'static> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Cache {
            store: self.store.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + 'static> std::ops::Deref for Cache<K> {
    type Target = Store<K>;

    fn deref(&self) -> &Store<K> {
        &self.store
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Cache<K> {
    /// Waits for the first complete list; any number of tasks may wait at once.
    pub async fn wait_until_ready(&self) -> Result<(), watch::error::RecvError> {
        self.ready.clone().wait_for(|r| *r).await.map(|_| ())
    }

    /// True once the cache holds a complete list.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// kube's store itself, for kube-runtime APIs that take one (never to wait on).
    pub fn kube_store(&self) -> Store<K> {
        self.store.clone()
    }
}

/// The shared cache of one kind and its changes.
pub struct Informer<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    changes: Subscribers<K>,
    by_controller: ByController<K>,
    by_node: Index<K>,
    /// True once the cache holds the first complete list.
    ready: watch::Receiver<bool>,
}

impl<K: Resource<DynamicType = ()> + 'static> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            store: self.store.clone(),
            changes: self.changes.clone(),
            by_controller: self.by_controller.clone(),
            by_node: self.by_node.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// Index key of the objects of `namespace` that have no controller.
fn orphans_key(namespace: &str) -> String {
    format!("_ORPHAN/{namespace}")
}

/// Index key to the objects under it by `namespace/name`.
type Buckets<K> = HashMap<String, HashMap<String, Arc<K>>>;

/// The cached objects grouped by a key computed from each (upstream's `Indexers`), kept by
/// the informer as it applies changes, so a controller reads the few objects under one key
/// instead of scanning the whole cache.
pub struct Index<K> {
    buckets: Arc<RwLock<Buckets<K>>>,
    key: fn(&K) -> Option<String>,
    /// True once the index holds the first complete list.
    ready: watch::Receiver<bool>,
}

impl<K> Clone for Index<K> {
    fn clone(&self) -> Self {
        Index {
            buckets: self.buckets.clone(),
            key: self.key,
            ready: self.ready.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Index<K> {
    fn new(key: fn(&K) -> Option<String>, ready: watch::Receiver<bool>) -> Self {
        Index {
            buckets: Arc::default(),
            key,
            ready,
        }
    }

    /// Waits for the first complete list (the cache's own readiness comes a moment sooner).
    pub async fn wait_until_ready(&self) -> Result<(), watch::error::RecvError> {
        self.ready.clone().wait_for(|r| *r).await.map(|_| ())
    }

    /// The objects under `key`.
    pub fn get(&self, key: &str) -> Vec<Arc<K>> {
        let buckets = self.buckets.read().expect("index");
        buckets
            .get(key)
            .into_iter()
            .flat_map(|m| m.values())
            .cloned()
            .collect()
    }

    fn object_key(obj: &K) -> String {
        format!(
            "{}/{}",
            obj.meta().namespace.as_deref().unwrap_or_default(),
            obj.meta().name.as_deref().unwrap_or_default()
        )
    }

    fn remove(&self, obj: &K) {
        let Some(key) = (self.key)(obj) else { return };
        let mut buckets = self.buckets.write().expect("index");
        if let Some(bucket) = buckets.get_mut(&key) {
            bucket.remove(&Self::object_key(obj));
            if bucket.is_empty() {
                buckets.remove(&key);
            }
        }
    }

    /// `previous` out and `obj` in under one lock: a reader never sees the object missing
    /// while it merely changes (the kubelet would take its pod for deleted).
    fn replace(&self, previous: Option<&K>, obj: Arc<K>) {
        let mut buckets = self.buckets.write().expect("index");
        if let Some(p) = previous
            && let Some(key) = (self.key)(p)
            && let Some(bucket) = buckets.get_mut(&key)
        {
            bucket.remove(&Self::object_key(p));
            if bucket.is_empty() {
                buckets.remove(&key);
            }
        }
        if let Some(key) = (self.key)(&obj) {
            buckets
                .entry(key)
                .or_default()
                .insert(Self::object_key(&obj), obj);
        }
    }

    fn rebuild(&self, objects: &[Arc<K>]) {
        let mut fresh: Buckets<K> = HashMap::new();
        for obj in objects {
            if let Some(key) = (self.key)(obj) {
                fresh
                    .entry(key)
                    .or_default()
                    .insert(Self::object_key(obj), obj.clone());
            }
        }
        *self.buckets.write().expect("index") = fresh;
    }
}

/// The cached objects by the UID of their controller, and those without one by namespace
/// (upstream's `PodControllerUIDIndex`).
pub struct ByController<K>(Index<K>);

impl<K> Clone for ByController<K> {
    fn clone(&self) -> Self {
        ByController(self.0.clone())
    }
}

impl<K: Resource<DynamicType = ()>> ByController<K> {
    fn key(obj: &K) -> Option<String> {
        Some(match controller_of(obj) {
            Some(owner) => owner.uid.clone(),
            None => orphans_key(obj.meta().namespace.as_deref().unwrap_or_default()),
        })
    }

    /// Waits for the first complete list.
    pub async fn wait_until_ready(&self) -> Result<(), watch::error::RecvError> {
        self.0.wait_until_ready().await
    }

    /// The objects `uid` controls, with the objects of `orphans_in` that have no controller
    /// (those a controller may adopt): upstream's `FilterPodsByOwner`.
    pub fn controlled_by(&self, uid: &str, orphans_in: Option<&str>) -> Vec<Arc<K>> {
        let mut objects = self.0.get(uid);
        if let Some(ns) = orphans_in {
            objects.extend(self.0.get(&orphans_key(ns)));
        }
        objects
    }
}

/// The node `pod` is bound to, if any (an empty `spec.nodeName` is none).
pub fn pod_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// The index key of upstream's `NodeNameIndexer`: a pod's node; other kinds have none.
fn bound_node<K: 'static>(obj: &K) -> Option<String> {
    pod_node((obj as &dyn Any).downcast_ref::<Pod>()?).map(str::to_string)
}

/// The indexes an informer keeps beside its cache.
struct Indexes<K> {
    by_controller: ByController<K>,
    by_node: Index<K>,
    ready: watch::Sender<bool>,
}

impl<K: Resource<DynamicType = ()> + 'static> Indexes<K> {
    fn new() -> Self {
        let (ready, rx) = watch::channel(false);
        Indexes {
            by_controller: ByController(Index::new(ByController::key, rx.clone())),
            by_node: Index::new(bound_node::<K>, rx),
            ready,
        }
    }

    fn all(&self) -> [&Index<K>; 2] {
        [&self.by_controller.0, &self.by_node]
    }

    fn replace(&self, previous: Option<&K>, object: Arc<K>) {
        for index in self.all() {
            index.replace(previous, object.clone());
        }
    }

    fn remove(&self, last: &K) {
        for index in self.all() {
            index.remove(last);
        }
    }

    fn rebuild(&self, objects: &[Arc<K>]) {
        for index in self.all() {
            index.rebuild(objects);
        }
        self.ready.send_replace(true);
    }
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts the watch into a new cache; it runs until the process ends.
    fn start(api: Api<K>, config: watcher::Config) -> Self {
        let (store, writer) = kube::runtime::reflector::store::<K>();
        let changes = Subscribers::new();
        let indexes = Indexes::new();
        let informer = Informer {
            store: store.clone(),
            changes: changes.clone(),
            by_controller: indexes.by_controller.clone(),
            by_node: indexes.by_node.clone(),
            ready: indexes.ready.subscribe(),
        };
        tokio::spawn(async move {
            // No component reads managedFields, and they are a good part of every object:
            // dropped before caching, as kube-scheduler's informers do. Unset, not emptied: an
            // update that sends `managedFields: []` resets them, one that omits them keeps them.
            let mut events = watcher::watcher(api, config)
                .default_backoff()
                .modify(|o| o.meta_mut().managed_fields = None)
                .boxed();
            let mut applier = Applier {
                writer,
                store,
                changes,
                indexes,
            };
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => applier.apply(event),
                    Err(e) => tracing::warn!(error = %e, kind = %K::kind(&()), "informer watch"),
                }
            }
        });
        informer
    }

    /// The cache.
    pub fn store(&self) -> Cache<K> {
        Cache {
            store: self.store.clone(),
            ready: self.ready.clone(),
        }
    }

    /// The cache by controller.
    pub fn by_controller(&self) -> ByController<K> {
        self.by_controller.clone()
    }

    /// The cached pods by the node they are bound to (empty for other kinds).
    pub fn by_node(&self) -> Index<K> {
        self.by_node.clone()
    }

    /// Every change from now on, starting with [`Change::Synced`] when the cache is complete
    /// already (else the first list's changes and its `Synced` come as they happen).
    pub fn changes(&self) -> impl Stream<Item = Change<K>> + Send + use<K> {
        let rx = self.changes.subscribe();
        // Subscribed first: whatever the first list publishes from now on reaches `rx`.
        let listed = *self.ready.borrow();
        let first = stream::iter(listed.then_some(Change::Synced));
        let rest = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
        first.chain(rest)
    }

    /// The objects of every change (for kube-runtime's `for_shared_stream` and
    /// `watches_shared_stream`): each changed object, and every cached one after a sync.
    pub fn touched(&self) -> impl Stream<Item = Arc<K>> + Send + use<K> {
        self.touched_after(|_| {})
    }

    /// [`Self::touched`], calling `on_change` with each change before its objects go on
    /// (expectations count what the cache has seen this way).
    pub fn touched_after<F>(&self, on_change: F) -> impl Stream<Item = Arc<K>> + Send + use<K, F>
    where
        F: FnMut(&Change<K>) + Send + 'static,
    {
        self.touched_with(on_change, false)
    }

    /// [`Self::touched_after`], and for an update that moved the object to another owner or
    /// changed its labels, its previous state too: the controller it left must count again
    /// (upstream's `updatePod` enqueues the old controller and the old labels' matches).
    pub fn touched_and_left_after<F>(
        &self,
        on_change: F,
    ) -> impl Stream<Item = Arc<K>> + Send + use<K, F>
    where
        F: FnMut(&Change<K>) + Send + 'static,
    {
        self.touched_with(on_change, true)
    }

    fn touched_with<F>(
        &self,
        mut on_change: F,
        with_left: bool,
    ) -> impl Stream<Item = Arc<K>> + Send + use<K, F>
    where
        F: FnMut(&Change<K>) + Send + 'static,
    {
        let store = self.store.clone();
        self.changes().flat_map(move |change| {
            on_change(&change);
            let objects = match change {
                Change::Applied {
                    object,
                    previous: Some(previous),
                } if with_left
                    && (previous.meta().owner_references != object.meta().owner_references
                        || previous.meta().labels != object.meta().labels) =>
                {
                    vec![object, previous]
                }
                Change::Applied { object, .. } | Change::Deleted(object) => vec![object],
                Change::Synced => store.state(),
            };
            stream::iter(objects)
        })
    }

    /// [`Self::touched`] without the updates that `matters(previous, object)` finds change
    /// nothing the subscriber reads (upstream's update handlers that return early when the
    /// fields they look at are equal). New objects, deletions and syncs always go on.
    pub fn touched_when<F>(&self, matters: F) -> impl Stream<Item = Arc<K>> + Send + use<K, F>
    where
        F: Fn(&K, &K) -> bool + Send + 'static,
    {
        let store = self.store.clone();
        self.changes().flat_map(move |change| {
            let objects = match change {
                Change::Applied {
                    object,
                    previous: Some(previous),
                } if !matters(&previous, &object) => Vec::new(),
                Change::Applied { object, .. } | Change::Deleted(object) => vec![object],
                Change::Synced => store.state(),
            };
            stream::iter(objects)
        })
    }
}

/// Applies watch events to the cache and publishes what they changed.
struct Applier<K: Resource<DynamicType = ()> + Clone + 'static> {
    writer: Writer<K>,
    store: Store<K>,
    changes: Subscribers<K>,
    indexes: Indexes<K>,
}

impl<K> Applier<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    fn publish(&self, change: Change<K>) {
        self.changes.send(change);
    }

    fn apply(&mut self, event: watcher::Event<K>) {
        match &event {
            watcher::Event::Apply(obj) => {
                let key = ObjectRef::from_obj(obj);
                let previous = self.store.get(&key);
                self.writer.apply_watcher_event(&event);
                if let Some(object) = self.store.get(&key) {
                    self.indexes.replace(previous.as_deref(), object.clone());
                    self.publish(Change::Applied { object, previous });
                }
            }
            watcher::Event::Delete(obj) => {
                let key = ObjectRef::from_obj(obj);
                let last = self
                    .store
                    .get(&key)
                    .unwrap_or_else(|| Arc::new(obj.clone()));
                self.writer.apply_watcher_event(&event);
                self.indexes.remove(&last);
                self.publish(Change::Deleted(last));
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {
                self.writer.apply_watcher_event(&event);
            }
            watcher::Event::InitDone => {
                // What the relist changed, as upstream's Replace delivers it.
                let before: HashMap<ObjectRef<K>, Arc<K>> = self
                    .store
                    .state()
                    .into_iter()
                    .map(|o| (ObjectRef::from_obj(o.as_ref()), o))
                    .collect();
                self.writer.apply_watcher_event(&event);
                self.indexes.rebuild(&self.store.state());
                let mut after_keys = std::collections::HashSet::new();
                for object in self.store.state() {
                    let key = ObjectRef::from_obj(object.as_ref());
                    let previous = before.get(&key).cloned();
                    let same = previous
                        .as_ref()
                        .is_some_and(|p| p.resource_version() == object.resource_version());
                    after_keys.insert(key);
                    if !same {
                        self.publish(Change::Applied { object, previous });
                    }
                }
                for (key, last) in before {
                    if !after_keys.contains(&key) {
                        self.publish(Change::Deleted(last));
                    }
                }
                self.publish(Change::Synced);
            }
        }
    }
}

/// The informers started, by kind and selection.
type Started = HashMap<(TypeId, String), Box<dyn Any + Send + Sync>>;

/// The informers of one process, started on first use.
pub struct Informers {
    client: Client,
    /// What the watches read through: the process's identity, shared by every view.
    reader: Client,
    started: Arc<Mutex<Started>>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers").finish_non_exhaustive()
    }
}

impl Informers {
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Informers {
            reader: client.clone(),
            client,
            started: Arc::default(),
        })
    }

    /// The same caches, with `client` as what [`Informers::client`] gives: a component that
    /// writes as an identity of its own (a controller's ServiceAccount) and reads through the
    /// process's shared watches.
    pub fn with_client(&self, client: Client) -> Arc<Self> {
        Arc::new(Informers {
            client,
            reader: self.reader.clone(),
            started: self.started.clone(),
        })
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The informer of every `K` in the cluster (all namespaces).
    pub fn of<K>(&self) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        ObjectRef<K>: Hash + Eq,
    {
        self.with(
            Api::all(self.reader.clone()),
            watcher::Config::default(),
            "",
        )
    }

    /// The informer of the `K` that `config` selects; `id` names the selection (two calls
    /// with the same id share one informer).
    pub fn selected<K>(&self, config: watcher::Config, id: &str) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        ObjectRef<K>: Hash + Eq,
    {
        self.with(Api::all(self.reader.clone()), config, id)
    }

    fn with<K>(&self, api: Api<K>, config: watcher::Config, id: &str) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let mut started = self.started.lock().expect("informers");
        let key = (TypeId::of::<K>(), id.to_string());
        if let Some(existing) = started.get(&key)
            && let Some(informer) = existing.downcast_ref::<Informer<K>>()
        {
            return informer.clone();
        }
        let informer = Informer::start(api, config);
        started.insert(key, Box::new(informer.clone()));
        informer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("default".into());
        c.metadata.resource_version = Some(rv.into());
        c
    }

    /// An applier of a fresh cache and indexes, and a subscriber to its changes.
    fn applier<K>() -> (Applier<K>, mpsc::UnboundedReceiver<Change<K>>)
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    {
        let (store, writer) = kube::runtime::reflector::store::<K>();
        let changes = Subscribers::new();
        let rx = changes.subscribe();
        let applier = Applier {
            writer,
            store,
            changes,
            indexes: Indexes::new(),
        };
        (applier, rx)
    }

    fn describe(c: &Change<ConfigMap>) -> String {
        match c {
            Change::Applied { object, previous } => format!(
                "applied {}@{} (was {})",
                object.name_any(),
                object.resource_version().unwrap_or_default(),
                previous
                    .as_ref()
                    .and_then(|p| p.resource_version())
                    .unwrap_or_else(|| "new".into())
            ),
            Change::Deleted(o) => format!("deleted {}", o.name_any()),
            Change::Synced => "synced".into(),
        }
    }

    #[tokio::test]
    async fn changes_carry_what_the_cache_held_and_relists_become_changes() {
        let (mut a, mut rx) = applier::<ConfigMap>();
        let (store, by_controller) = (a.store.clone(), a.indexes.by_controller.clone());
        a.apply(watcher::Event::Init);
        a.apply(watcher::Event::InitApply(cm("a", "1")));
        a.apply(watcher::Event::InitApply(cm("b", "2")));
        a.apply(watcher::Event::InitDone);
        a.apply(watcher::Event::Apply(cm("a", "3")));
        a.apply(watcher::Event::Delete(cm("b", "4")));
        // A relist that finds `a` changed, `b` back, and `c` gone missing while unwatched.
        a.apply(watcher::Event::Apply(cm("c", "5")));
        a.apply(watcher::Event::Init);
        a.apply(watcher::Event::InitApply(cm("a", "6")));
        a.apply(watcher::Event::InitApply(cm("b", "7")));
        a.apply(watcher::Event::InitDone);
        let mut seen = Vec::new();
        while let Ok(c) = rx.try_recv() {
            seen.push(describe(&c));
        }
        seen[..2].sort();
        seen[6..8].sort();
        assert_eq!(
            seen,
            [
                "applied a@1 (was new)",
                "applied b@2 (was new)",
                "synced",
                "applied a@3 (was 1)",
                "deleted b",
                "applied c@5 (was new)",
                "applied a@6 (was 3)",
                "applied b@7 (was new)",
                "deleted c",
                "synced",
            ]
        );
        assert_eq!(store.state().len(), 2);
        let mut orphans: Vec<String> = by_controller
            .controlled_by("none", Some("default"))
            .iter()
            .map(|c| {
                format!(
                    "{}@{}",
                    c.name_any(),
                    c.resource_version().unwrap_or_default()
                )
            })
            .collect();
        orphans.sort();
        assert_eq!(orphans, ["a@6", "b@7"]);
    }

    fn owned(name: &str, owner: Option<&str>) -> ConfigMap {
        let mut c = cm(name, "1");
        c.metadata.owner_references = owner.map(|uid| {
            vec![OwnerReference {
                uid: uid.into(),
                controller: Some(true),
                ..Default::default()
            }]
        });
        c
    }

    /// kube's `Store::wait_until_ready` wakes only its last waiter; every holder of a shared
    /// cache must wake, whatever polled it in between.
    #[tokio::test]
    async fn every_waiter_on_a_shared_cache_wakes_when_it_is_listed() {
        let (mut a, _rx) = applier::<ConfigMap>();
        let cache = Cache {
            store: a.store.clone(),
            ready: a.indexes.ready.subscribe(),
        };
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.wait_until_ready().await })
            })
            .collect();
        // Each waiter polls once and sleeps; then a check in passing, as `changes` does.
        tokio::task::yield_now().await;
        assert!(!cache.is_ready());
        a.apply(watcher::Event::Init);
        a.apply(watcher::Event::InitDone);
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("a waiter on the shared cache was never woken")
                .unwrap()
                .unwrap();
        }
        assert!(cache.is_ready());
    }

    #[tokio::test]
    async fn the_controller_index_follows_adoption_release_and_deletion() {
        let (mut a, _rx) = applier::<ConfigMap>();
        let by_controller = a.indexes.by_controller.clone();
        let names = |uid: &str, orphans: Option<&str>| {
            let mut n: Vec<String> = by_controller
                .controlled_by(uid, orphans)
                .iter()
                .map(|c| c.name_any())
                .collect();
            n.sort();
            n
        };
        assert!(by_controller.wait_until_ready().now_or_never().is_none());
        a.apply(watcher::Event::Init);
        a.apply(watcher::Event::InitApply(owned("a", Some("rs-1"))));
        a.apply(watcher::Event::InitApply(owned("b", None)));
        a.apply(watcher::Event::InitDone);
        assert!(by_controller.wait_until_ready().now_or_never().is_some());
        assert_eq!(names("rs-1", None), ["a"]);
        assert_eq!(names("rs-1", Some("default")), ["a", "b"]);
        assert!(names("rs-1", Some("other")) == ["a"]);
        // Adopted, released to another controller, then deleted.
        a.apply(watcher::Event::Apply(owned("b", Some("rs-1"))));
        assert_eq!(names("rs-1", Some("default")), ["a", "b"]);
        a.apply(watcher::Event::Apply(owned("a", Some("rs-2"))));
        assert_eq!(names("rs-1", None), ["b"]);
        assert_eq!(names("rs-2", None), ["a"]);
        a.apply(watcher::Event::Delete(owned("a", Some("rs-2"))));
        assert!(names("rs-2", Some("default")).is_empty());
        assert!(
            by_controller
                .0
                .buckets
                .read()
                .unwrap()
                .get("rs-2")
                .is_none()
        );
    }

    fn pod(name: &str, node: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: node.map(String::from),
            ..Default::default()
        });
        p
    }

    #[tokio::test]
    async fn the_node_index_follows_binding_and_deletion() {
        let (mut a, _rx) = applier::<Pod>();
        let by_node = a.indexes.by_node.clone();
        let on = |node: &str| {
            let mut n: Vec<String> = by_node.get(node).iter().map(|p| p.name_any()).collect();
            n.sort();
            n
        };
        a.apply(watcher::Event::Init);
        a.apply(watcher::Event::InitApply(pod("a", Some("n1"))));
        a.apply(watcher::Event::InitApply(pod("b", None)));
        a.apply(watcher::Event::InitDone);
        assert!(by_node.wait_until_ready().now_or_never().is_some());
        assert_eq!(on("n1"), ["a"]);
        // Unbound pods are under no node; binding moves them there.
        assert!(by_node.buckets.read().unwrap().len() == 1);
        a.apply(watcher::Event::Apply(pod("b", Some("n1"))));
        a.apply(watcher::Event::Apply(pod("c", Some("n2"))));
        assert_eq!(on("n1"), ["a", "b"]);
        assert_eq!(on("n2"), ["c"]);
        a.apply(watcher::Event::Delete(pod("a", Some("n1"))));
        assert_eq!(on("n1"), ["b"]);
        // Other kinds have no node: their index stays empty.
        let cms: Indexes<ConfigMap> = Indexes::new();
        cms.replace(None, Arc::new(cm("x", "1")));
        assert!(cms.by_node.buckets.read().unwrap().is_empty());
    }
}
