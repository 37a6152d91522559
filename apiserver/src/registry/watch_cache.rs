//! The watch cache of one resource (upstream's Cacher): one store watch per resource instead
//! of one per client, every change decoded once, kept in memory with a window of recent
//! events, and fanned out to every watcher with its selectors applied. Each object's JSON is
//! encoded once, however many watchers and lists send it.
//!
//! The cache keeps one form of each object: its JSON, with what selectors look at (labels
//! and the kind's selectable fields) taken out beside it. A decoded object is several times
//! the size of its JSON, and nearly every reader (watchers, lists, in-process informers)
//! wants JSON; the few that do not (Table, YAML, protobuf) decode it again.
//!
//! Watches from a resourceVersion the window still holds, and from "now" (`0` or unset, which
//! replay the state first), are served here; an older start falls back to the store, which
//! keeps history until compaction (410 after that, as before). Lists with `resourceVersion=0`,
//! with `NotOlderThan`, or consistent lists without a limit, are served from memory once the
//! cache has reached the revision they need.
//!
//! One task follows the store; registering a watcher and applying an event both take the
//! state lock, so a new watcher gets every event after its snapshot exactly once. A watcher
//! that cannot keep up (its buffer is full) is closed: its client resumes from the last
//! resourceVersion it saw, from the window.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use minik8s_api::ApiError;
use minik8s_api::selector::{FieldSelector, Selector, selects};
use minik8s_api::strategy::Strategy;
use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};
use tokio::sync::{mpsc, watch};

use crate::storage::{DynStore, Event, KeyValue, ListOptions, Revision, StoreError};

/// Events kept for resuming watches: those of the last 75 seconds (upstream's
/// `eventFreshDuration`), at least this many and at most ten times as many.
const WINDOW_MIN: usize = 1_000;
const WINDOW_FRESH: Duration = Duration::from_secs(75);
/// Live events buffered for one watcher before it is closed as too slow.
const WATCHER_BUFFER: usize = 4_096;
/// How long a read waits for the cache to reach the revision it needs.
const REVISION_WAIT: Duration = Duration::from_secs(3);

/// Upstream's watch cache metrics, process-wide (the default registry, which `/metrics`
/// renders after the server's own): how far each cache has got, to compare with
/// `apiserver_storage_revision`, and how consistent reads were served.
struct CacheMetrics {
    resource_version: prometheus::IntGaugeVec,
    consistent_reads: prometheus::IntCounterVec,
}

static METRICS: LazyLock<CacheMetrics> = LazyLock::new(|| {
    let resource_version = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "apiserver_watch_cache_resource_version",
            "Current resource version of the watch cache broken by resource type",
        ),
        &["resource"],
    )
    .expect("metric");
    let consistent_reads = prometheus::IntCounterVec::new(
        prometheus::Opts::new(
            "apiserver_watch_cache_consistent_read_total",
            "Counter for consistent reads from cache",
        ),
        &["resource", "success", "fallback"],
    )
    .expect("metric");
    // Several servers in one process (tests) share these; the second registration is refused.
    let registry = prometheus::default_registry();
    let _ = registry.register(Box::new(resource_version.clone()));
    let _ = registry.register(Box::new(consistent_reads.clone()));
    CacheMetrics {
        resource_version,
        consistent_reads,
    }
});

/// Counts a consistent read of `resource`; `fallback`: served by the store because the
/// cache had not reached the store's revision in time.
pub fn count_consistent_read(resource: &str, success: bool, fallback: bool) {
    METRICS
        .consistent_reads
        .with_label_values(&[resource, bool_label(success), bool_label(fallback)])
        .inc();
}

fn bool_label(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

/// An object as the cache (or a read from the store) holds it, with its resourceVersion:
/// its JSON, encoded once and shared by every watcher and list that sends it.
pub struct Cached<O> {
    json: Bytes,
    kind: PhantomData<fn() -> O>,
}

impl<O: Serialize> Cached<O> {
    pub fn new(object: O) -> Arc<Self> {
        Arc::new(Cached {
            json: Bytes::from(serde_json::to_vec(&object).unwrap_or_default()),
            kind: PhantomData,
        })
    }
}

impl<O> Cached<O> {
    /// The object's JSON.
    pub fn json(&self) -> Bytes {
        self.json.clone()
    }
}

impl<O: DeserializeOwned> Cached<O> {
    /// The object, decoded again.
    pub fn decode(&self) -> Result<O, serde_json::Error> {
        serde_json::from_slice(&self.json)
    }
}

/// Renders other than JSON (Table, YAML, protobuf) go through a JSON value anyway.
impl<O> Serialize for Cached<O> {
    fn serialize<Ser: Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        serde_json::from_slice::<serde_json::Value>(&self.json)
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

impl<O> std::fmt::Debug for Cached<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached").finish_non_exhaustive()
    }
}

/// Something a response can carry as JSON without encoding it again.
pub trait Encoded: Serialize {
    fn json(&self) -> Bytes;

    /// The object as a JSON value (for Table, YAML and protobuf).
    fn value(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_slice(&self.json())
    }

    /// `{"metadata": ...}` of the object alone, the rest skipped unparsed (for
    /// PartialObjectMetadata, which the garbage collector watches every resource as).
    fn metadata_value(&self) -> serde_json::Result<serde_json::Value> {
        #[derive(serde::Deserialize)]
        struct MetadataOnly {
            #[serde(default)]
            metadata: serde_json::Value,
        }
        let m: MetadataOnly = serde_json::from_slice(&self.json())?;
        Ok(serde_json::json!({ "metadata": m.metadata }))
    }
}

impl<O> Encoded for Arc<Cached<O>> {
    fn json(&self) -> Bytes {
        Cached::json(self)
    }
}

/// What selectors look at in one object: its labels and every field the kind selects on.
#[derive(Debug, Default)]
pub struct Attrs {
    pub labels: Option<BTreeMap<String, String>>,
    /// `metadata.name`, `metadata.namespace` and the kind's selectable fields.
    pub fields: Vec<(String, Option<String>)>,
}

impl Attrs {
    fn matches(&self, labels: &Selector, fields: &FieldSelector) -> bool {
        selects(labels, fields, self.labels.as_ref(), |f| {
            self.fields
                .iter()
                .find(|(name, _)| name == f)
                .and_then(|(_, v)| v.clone())
        })
    }
}

/// One object in the cache: its JSON and what its selectors look at.
struct Entry<O> {
    cached: Arc<Cached<O>>,
    attrs: Arc<Attrs>,
}

/// One change the cache applied.
struct Change<O> {
    revision: Revision,
    key: String,
    /// The object after the change; for a delete, its last state at the delete's revision.
    object: Arc<Entry<O>>,
    /// The object before the change (`None` for a create).
    prev: Option<Arc<Entry<O>>>,
    /// `prev` at this change's revision: what watchers whose selection the object leaves
    /// get as deleted; made on first need.
    left: OnceLock<Arc<Cached<O>>>,
    deleted: bool,
    at: Instant,
}

/// What a watcher is sent.
pub enum Delivered<O> {
    Added(Arc<Cached<O>>),
    Modified(Arc<Cached<O>>),
    Deleted(Arc<Cached<O>>),
    Bookmark(Revision),
}

/// Which changes a watcher wants.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Keys under this prefix only (the namespace's).
    pub prefix: String,
    pub labels: Selector,
    pub fields: FieldSelector,
}

struct Watcher<O> {
    filter: Filter,
    tx: mpsc::Sender<Delivered<O>>,
    bookmarks: Option<Duration>,
    last_bookmark: Instant,
}

struct State<O> {
    objects: BTreeMap<String, Arc<Entry<O>>>,
    /// The newest revision the cache reflects (changes and progress reports).
    revision: Revision,
    window: VecDeque<Arc<Change<O>>>,
    /// Every change after this revision is in the window.
    window_start: Revision,
    watchers: HashMap<u64, Watcher<O>>,
    next_id: u64,
}

/// Takes out of an object what selectors look at.
pub type Indexer<O> = Arc<dyn Fn(&O) -> Attrs + Send + Sync>;

pub struct WatchCache<S: Strategy> {
    strategy: Arc<S>,
    index: Indexer<S::Object>,
    store: DynStore,
    prefix: String,
    state: Mutex<State<S::Object>>,
    /// The revision reached, for reads that wait for one; 0 until the first list is in.
    reached: watch::Sender<Revision>,
    /// Upstream's group-resource (`pods`, `deployments.apps`), as metrics label it.
    resource: String,
    /// `apiserver_watch_cache_resource_version` of this resource.
    revision_gauge: prometheus::IntGauge,
}

/// A watcher's events: `initial` first, then `live`.
pub struct Subscription<O> {
    pub initial: Vec<Delivered<O>>,
    pub live: BoxStream<'static, Delivered<O>>,
    /// The revision `initial` brings the watcher to.
    pub revision: Revision,
}

/// A running cache; its task stops once the handle and every [`CacheHandle::keepalive`]
/// are dropped.
pub struct CacheHandle<S: Strategy> {
    pub cache: Arc<WatchCache<S>>,
    stop: Arc<tokio::sync::oneshot::Sender<()>>,
}

impl<S: Strategy> CacheHandle<S> {
    /// Keeps the cache following the store while held: an open watch holds one, so that it
    /// still gets the changes written after its registry was replaced (a CRD that starts
    /// terminating is served anew, its open watches go on).
    pub fn keepalive(&self) -> impl Send + Sync + 'static {
        self.stop.clone()
    }
}

/// Where a watch starts.
pub enum Start {
    /// The current state first (as ADDED events), then every change.
    Replay,
    /// Every change after this revision.
    After(Revision),
}

impl<S: Strategy> WatchCache<S>
where
    S::Object: Serialize,
{
    /// Starts following `prefix` of `store`, until the returned handle is dropped.
    pub fn start(
        strategy: Arc<S>,
        index: Indexer<S::Object>,
        store: DynStore,
        prefix: String,
    ) -> CacheHandle<S> {
        let info = strategy.info();
        // Upstream's group-resource: `pods`, `deployments.apps`.
        let resource = match info.group.as_str() {
            "" => info.plural.clone(),
            group => format!("{}.{group}", info.plural),
        };
        let revision_gauge = METRICS.resource_version.with_label_values(&[&resource]);
        let cache = Arc::new(WatchCache {
            strategy,
            index,
            store,
            prefix,
            state: Mutex::new(State {
                objects: BTreeMap::new(),
                revision: 0,
                window: VecDeque::new(),
                window_start: 0,
                watchers: HashMap::new(),
                next_id: 0,
            }),
            reached: watch::channel(0).0,
            resource,
            revision_gauge,
        });
        // A cache nobody serves from any more (a custom resource no longer served) stops
        // following the store when its handle goes.
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = cache.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(100);
            loop {
                tokio::select! {
                    result = task.follow() => match result {
                        Ok(()) => backoff = Duration::from_millis(100),
                        Err(e) => {
                            tracing::warn!(prefix = %task.prefix, error = %e, "watch cache relists");
                            backoff = (backoff * 2).min(Duration::from_secs(10));
                        }
                    },
                    _ = &mut stopped => return,
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = &mut stopped => return,
                }
            }
        });
        CacheHandle {
            cache,
            stop: Arc::new(stop),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<S::Object>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `entry`'s object with `revision` as its resourceVersion (what a delete reports).
    fn at_revision(&self, entry: &Entry<S::Object>, revision: Revision) -> Arc<Entry<S::Object>> {
        let cached = match entry.cached.decode() {
            Ok(mut obj) => {
                self.strategy.meta_mut(&mut obj).resource_version = Some(revision.to_string());
                Cached::new(obj)
            }
            Err(_) => entry.cached.clone(),
        };
        Arc::new(Entry {
            cached,
            attrs: entry.attrs.clone(),
        })
    }

    fn decode(&self, kv: &KeyValue, revision: Revision) -> Result<Arc<Entry<S::Object>>, String> {
        let mut obj = self.strategy.decode_stored(&kv.value)?;
        self.strategy.meta_mut(&mut obj).resource_version = Some(revision.to_string());
        let attrs = Arc::new((self.index)(&obj));
        Ok(Arc::new(Entry {
            cached: Cached::new(obj),
            attrs,
        }))
    }

    /// Lists, then applies every change until the store's watch ends or fails.
    async fn follow(&self) -> Result<(), StoreError> {
        let list = self
            .store
            .list(ListOptions {
                prefix: self.prefix.clone(),
                ..Default::default()
            })
            .await?;
        let mut objects = BTreeMap::new();
        for kv in &list.kvs {
            match self.decode(kv, kv.mod_revision) {
                Ok(entry) => {
                    objects.insert(kv.key.clone(), entry);
                }
                Err(e) => {
                    tracing::error!(key = %kv.key, error = %e, "corrupt object left out of the watch cache")
                }
            }
        }
        {
            let mut state = self.lock();
            state.objects = objects;
            state.revision = list.revision;
            state.window.clear();
            state.window_start = list.revision;
            // Watchers of an earlier list cannot be continued exactly: they end and resume.
            state.watchers.clear();
        }
        // A store without any write yet is at revision 0; the cache is listed all the same.
        self.reach(list.revision.max(1));
        let mut events = self.store.watch(&self.prefix, list.revision).await?;
        while let Some(event) = events.next().await {
            self.apply(event?);
        }
        Ok(())
    }

    /// Upstream's group-resource of the cached kind (`pods`, `deployments.apps`).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Tells readers waiting for a revision (and the metric) that the cache reflects `rev`.
    fn reach(&self, rev: Revision) {
        self.reached.send_replace(rev);
        self.revision_gauge.set(rev);
    }

    fn apply(&self, event: Event) {
        let revision = event.revision();
        // Decoded before taking the lock: lists and new watchers need not wait for it.
        let decoded = match &event {
            Event::Put { kv, .. } => match self.decode(kv, kv.mod_revision) {
                Ok(entry) => Some(entry),
                Err(e) => {
                    tracing::error!(key = %kv.key, error = %e, "corrupt object left out of the watch cache");
                    return;
                }
            },
            _ => None,
        };
        let mut state = self.lock();
        let change = match event {
            Event::Progress(rev) => {
                state.revision = state.revision.max(rev);
                let now = Instant::now();
                state.watchers.retain(|_, w| match w.bookmarks {
                    Some(every) if now.duration_since(w.last_bookmark) >= every => {
                        w.last_bookmark = now;
                        !matches!(
                            w.tx.try_send(Delivered::Bookmark(rev)),
                            Err(mpsc::error::TrySendError::Closed(_))
                        )
                    }
                    _ => !w.tx.is_closed(),
                });
                drop(state);
                self.reach(rev);
                return;
            }
            Event::Put { kv, .. } => {
                let Some(object) = decoded else { return };
                let prev = state.objects.insert(kv.key.clone(), object.clone());
                Change {
                    revision,
                    key: kv.key,
                    object,
                    prev,
                    left: OnceLock::new(),
                    deleted: false,
                    at: Instant::now(),
                }
            }
            Event::Delete { prev, revision } => {
                let object = match state.objects.remove(&prev.key) {
                    Some(entry) => self.at_revision(&entry, revision),
                    None => match self.decode(&prev, revision) {
                        Ok(entry) => entry,
                        Err(_) => return,
                    },
                };
                Change {
                    revision,
                    key: prev.key,
                    prev: Some(object.clone()),
                    object,
                    left: OnceLock::new(),
                    deleted: true,
                    at: Instant::now(),
                }
            }
        };
        let change = Arc::new(change);
        state.revision = revision;
        state.window.push_back(change.clone());
        while state.window.len() > WINDOW_MIN
            && (state.window.len() > WINDOW_MIN * 10
                || state
                    .window
                    .front()
                    .is_some_and(|c| c.at.elapsed() > WINDOW_FRESH))
        {
            if let Some(old) = state.window.pop_front() {
                state.window_start = old.revision;
            }
        }
        let at_revision =
            |e: &Entry<S::Object>, rev: Revision| self.at_revision(e, rev).cached.clone();
        state.watchers.retain(|_, w| {
            let Some(delivered) = deliver(&at_revision, &w.filter, &change) else {
                return !w.tx.is_closed();
            };
            match w.tx.try_send(delivered) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::info!(key = %change.key, "closing a watcher that fell behind");
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        drop(state);
        self.reach(revision);
    }

    /// Waits until the cache reflects `revision` (at most a few seconds); the revision
    /// reached, or `None` when it did not get there in time.
    pub async fn wait_for(&self, revision: Revision) -> Option<Revision> {
        let mut rx = self.reached.subscribe();
        if *rx.borrow() < revision && *rx.borrow() > 0 {
            // Nothing under this prefix may change for a while: the store says where it is.
            self.store.request_progress();
        }
        let reached = tokio::time::timeout(REVISION_WAIT, rx.wait_for(|r| *r >= revision.max(1)))
            .await
            .ok()?
            .ok()?;
        Some(*reached)
    }

    /// The objects under `filter` at the cache's revision (at least `min_revision`).
    pub async fn list(
        &self,
        filter: &Filter,
        min_revision: Revision,
    ) -> Result<(Vec<Arc<Cached<S::Object>>>, Revision), ApiError> {
        if self.wait_for(min_revision).await.is_none() {
            let current = *self.reached.borrow();
            return Err(ApiError::too_large_resource_version(min_revision, current));
        }
        let state = self.lock();
        let items = state
            .objects
            .range(filter.prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&filter.prefix))
            .filter(|(_, e)| e.attrs.matches(&filter.labels, &filter.fields))
            .map(|(_, e)| e.cached.clone())
            .collect();
        Ok((items, state.revision))
    }

    /// The object at `key`, as the cache holds it.
    pub async fn get(&self, key: &str) -> Option<Arc<Cached<S::Object>>> {
        self.wait_for(1).await?;
        self.lock().objects.get(key).map(|e| e.cached.clone())
    }

    /// A watch of the changes under `filter` from `start`: what to send first (the replay of
    /// the state, or the window's changes after the start), then the live changes, and the
    /// revision the first part ends at. `None` when the window no longer holds the start
    /// (the caller reads the store's history instead). With `bookmarks`, a BOOKMARK at most
    /// that often while the resource is idle.
    pub async fn watch(
        &self,
        filter: Filter,
        start: Start,
        bookmarks: Option<Duration>,
    ) -> Result<Option<Subscription<S::Object>>, ApiError> {
        let wanted = match start {
            Start::After(rev) => rev,
            Start::Replay => 1,
        };
        if self.wait_for(wanted).await.is_none() {
            let current = *self.reached.borrow();
            return Err(ApiError::too_large_resource_version(wanted, current));
        }
        let (tx, rx) = mpsc::channel(WATCHER_BUFFER);
        let mut state = self.lock();
        let (initial, revision): (Vec<Delivered<S::Object>>, Revision) = match start {
            Start::Replay => (
                state
                    .objects
                    .range(filter.prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&filter.prefix))
                    .filter(|(_, e)| e.attrs.matches(&filter.labels, &filter.fields))
                    .map(|(_, e)| Delivered::Added(e.cached.clone()))
                    .collect(),
                state.revision,
            ),
            Start::After(rev) => {
                if rev < state.window_start {
                    return Ok(None);
                }
                let first = state.window.partition_point(|c| c.revision <= rev);
                let at_revision =
                    |e: &Entry<S::Object>, rev: Revision| self.at_revision(e, rev).cached.clone();
                let replay = state
                    .window
                    .range(first..)
                    .filter_map(|c| deliver(&at_revision, &filter, c))
                    .collect();
                (replay, rev)
            }
        };
        let id = state.next_id;
        state.next_id += 1;
        state.watchers.insert(
            id,
            Watcher {
                filter,
                tx,
                bookmarks,
                last_bookmark: Instant::now(),
            },
        );
        drop(state);
        Ok(Some(Subscription {
            initial,
            live: tokio_stream::wrappers::ReceiverStream::new(rx).boxed(),
            revision,
        }))
    }
}

/// What `change` means to a watcher with `filter`: selector transitions look like an add or
/// a delete, as upstream's watchers see them.
fn deliver<O>(
    at_revision: &impl Fn(&Entry<O>, Revision) -> Arc<Cached<O>>,
    filter: &Filter,
    change: &Change<O>,
) -> Option<Delivered<O>> {
    if !change.key.starts_with(&filter.prefix) {
        return None;
    }
    let filtering = !filter.labels.is_empty() || !filter.fields.is_empty();
    let is = |e: &Arc<Entry<O>>| !filtering || e.attrs.matches(&filter.labels, &filter.fields);
    let object = || change.object.cached.clone();
    if change.deleted {
        return is(&change.object).then(|| Delivered::Deleted(object()));
    }
    let now = is(&change.object);
    let was = change.prev.as_ref().is_some_and(is);
    match (was, now) {
        (false, true) => Some(Delivered::Added(object())),
        (true, true) => Some(Delivered::Modified(object())),
        // Leaving the selection: the old state, at the revision that changed it.
        (true, false) => change.prev.as_ref().map(|prev| {
            let left = change
                .left
                .get_or_init(|| at_revision(prev, change.revision));
            Delivered::Deleted(left.clone())
        }),
        (false, false) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::storage::{SqliteOptions, SqliteStore};
    use k8s_openapi::api::core::v1::ConfigMap;
    use minik8s_api::strategy::BuiltIn;

    const ROOT: &str = "/registry/configmaps/";

    struct Env {
        store: DynStore,
        cache: Arc<WatchCache<BuiltIn<ConfigMap>>>,
        _handle: CacheHandle<BuiltIn<ConfigMap>>,
        _dir: tempfile::TempDir,
    }

    fn strategy() -> BuiltIn<ConfigMap> {
        BuiltIn::new(crate::registry::typed::info::<ConfigMap>())
    }

    fn env() -> Env {
        env_with(SqliteOptions::new)
    }

    fn env_with(options: impl FnOnce(std::path::PathBuf) -> SqliteOptions) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let store: DynStore = Arc::new(
            SqliteStore::open(options(dir.path().join("state.db")), metrics.store.clone()).unwrap(),
        );
        let handle = WatchCache::start(
            Arc::new(strategy()),
            Arc::new(|cm: &ConfigMap| Attrs {
                labels: cm.metadata.labels.clone(),
                fields: vec![("metadata.name".into(), cm.metadata.name.clone())],
            }),
            store.clone(),
            ROOT.into(),
        );
        Env {
            store,
            cache: handle.cache.clone(),
            _handle: handle,
            _dir: dir,
        }
    }

    fn cm(name: &str, app: &str) -> Bytes {
        Bytes::from(
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default", "labels": {"app": app}}
            }))
            .unwrap(),
        )
    }

    fn key(name: &str) -> String {
        format!("{ROOT}default/{name}")
    }

    fn selected(app: &str) -> Filter {
        Filter {
            prefix: format!("{ROOT}default/"),
            labels: Selector::parse(&format!("app={app}")).unwrap(),
            fields: FieldSelector::default(),
        }
    }

    /// `ADDED a@5` and the like.
    fn describe(d: &Delivered<ConfigMap>) -> String {
        let (ty, o) = match d {
            Delivered::Added(o) => ("ADDED", o),
            Delivered::Modified(o) => ("MODIFIED", o),
            Delivered::Deleted(o) => ("DELETED", o),
            Delivered::Bookmark(rev) => return format!("BOOKMARK@{rev}"),
        };
        let o = o.decode().unwrap();
        format!(
            "{ty} {}@{}",
            o.metadata.name.clone().unwrap_or_default(),
            o.metadata.resource_version.clone().unwrap_or_default()
        )
    }

    /// A consistent list needs the cache at the store's newest revision, which a write of
    /// another kind moves; the cache must not wait for the next periodic progress report.
    #[tokio::test]
    async fn consistent_list_after_a_write_elsewhere_asks_the_store_for_progress() {
        let e = env_with(|path| SqliteOptions {
            progress_interval: Duration::from_secs(3600),
            ..SqliteOptions::new(path)
        });
        e.store.create(&key("a"), cm("a", "web")).await.unwrap();
        e.cache.wait_for(1).await.unwrap();
        for i in 0..3 {
            let other = e
                .store
                .create(&format!("/registry/secrets/default/s{i}"), cm("s", "x"))
                .await
                .unwrap();
            let current = e.store.current_revision().await.unwrap();
            assert_eq!(current, other.mod_revision);
            let (items, revision) = e.cache.list(&selected("web"), current).await.unwrap();
            assert_eq!(items.len(), 1);
            assert!(
                revision >= current,
                "listed at {revision}, wanted {current}"
            );
        }
    }

    #[tokio::test]
    async fn lists_and_watches_from_memory_with_selector_transitions() {
        let e = env();
        let a = e.store.create(&key("a"), cm("a", "web")).await.unwrap();
        e.store.create(&key("b"), cm("b", "db")).await.unwrap();
        let (items, rev) = e
            .cache
            .list(&selected("web"), a.mod_revision)
            .await
            .unwrap();
        assert_eq!(items.len(), 1);
        assert!(rev >= a.mod_revision);
        let listed = items[0].decode().unwrap();
        assert_eq!(listed.metadata.name.as_deref(), Some("a"));
        assert_eq!(
            listed.metadata.resource_version,
            Some(a.mod_revision.to_string())
        );
        assert_eq!(
            items[0].json(),
            Cached::new(listed).json(),
            "the JSON of the cached object"
        );
        let by_name = Filter {
            fields: FieldSelector::parse("metadata.name=b").unwrap(),
            ..selected("db")
        };
        let now = e.store.current_revision().await.unwrap();
        let (items, _) = e.cache.list(&by_name, now).await.unwrap();
        assert_eq!(items.len(), 1, "a field selector on the indexed name");

        let sub = e
            .cache
            .watch(selected("web"), Start::Replay, None)
            .await
            .unwrap()
            .unwrap();
        let initial: Vec<String> = sub.initial.iter().map(describe).collect();
        assert_eq!(initial, [format!("ADDED a@{}", a.mod_revision)]);
        let mut live = sub.live;
        // b joins the selection, a leaves it, b is deleted.
        let b2 = e
            .store
            .update(&key("b"), cm("b", "web"), a.mod_revision + 1)
            .await
            .unwrap();
        let a2 = e
            .store
            .update(&key("a"), cm("a", "db"), a.mod_revision)
            .await
            .unwrap();
        let (_, deleted) = e.store.delete(&key("b"), None).await.unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(describe(&live.next().await.unwrap()));
        }
        assert_eq!(
            seen,
            [
                format!("ADDED b@{}", b2.mod_revision),
                format!("DELETED a@{}", a2.mod_revision),
                format!("DELETED b@{deleted}"),
            ]
        );

        // A watch from a revision in the window gets what came after it, filtered.
        let sub = e
            .cache
            .watch(selected("web"), Start::After(a.mod_revision + 1), None)
            .await
            .unwrap()
            .unwrap();
        let replayed: Vec<String> = sub.initial.iter().map(describe).collect();
        assert_eq!(replayed, seen);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watcher_that_falls_behind_is_closed_and_others_go_on() {
        let e = env();
        let all = Filter {
            prefix: ROOT.into(),
            ..Default::default()
        };
        let slow = e
            .cache
            .watch(all.clone(), Start::Replay, None)
            .await
            .unwrap()
            .unwrap();
        let fast = e
            .cache
            .watch(all, Start::Replay, None)
            .await
            .unwrap()
            .unwrap();
        let mut fast_live = fast.live;
        let total = WATCHER_BUFFER + 10;
        let reader = tokio::spawn(async move {
            let mut n = 0;
            while n < total {
                fast_live.next().await.unwrap();
                n += 1;
            }
            n
        });
        for i in 0..total {
            e.store
                .create(&key(&format!("c{i}")), cm("c", "x"))
                .await
                .unwrap();
        }
        assert_eq!(reader.await.unwrap(), total);
        let received = slow.live.count().await;
        assert!(received <= WATCHER_BUFFER, "{received}");
    }
}
