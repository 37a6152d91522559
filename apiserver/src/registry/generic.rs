//! The generic registry: upstream's `registry.Store` for one resource. It owns the rules every
//! kind shares (system metadata, optimistic concurrency, graceful deletion and finalizers,
//! resourceVersion semantics of list and watch, selectors) and asks the kind's `Strategy` for
//! the rest. HTTP concerns stay in `handlers`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Preconditions, Time};
use minik8s_api::selector::{FieldSelector, Selector, selects};
use minik8s_api::strategy::{GcPolicy, Strategy};
use minik8s_api::validation::{
    FieldError, Path, validate_object_meta, validate_object_meta_update,
};
use minik8s_api::{ApiError, Target, meta};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::watch_cache::{
    Attrs, CacheHandle, Cached, Delivered, Filter, Start, WatchCache, count_consistent_read,
};
use crate::storage::{DynStore, Event, KeyValue, ListOptions, Revision, StoreError};

/// How long a read for a resourceVersion the store has not reached yet waits before 504.
const FUTURE_REVISION_WAIT: Duration = Duration::from_secs(3);

/// Which part of an object an update may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
    /// Pods' `ephemeralcontainers` subresource.
    EphemeralContainers,
}

impl Part {
    /// The subresource of a write of this part.
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Part::Main => None,
            Part::Status => Some("status"),
            Part::EphemeralContainers => Some("ephemeralcontainers"),
        }
    }
}

/// Records `metadata.managedFields` of a write: called with the object about to be stored
/// (defaulted and validated) and the stored object it replaces (`None` on create).
pub type Track<'a, O> = Option<&'a (dyn Fn(&mut O, Option<&O>) + Send + Sync)>;

/// State a kind keeps beside its objects (upstream's BeginCreate/BeginUpdate/AfterDelete
/// hooks): the Service cluster IP and node port allocators. A create or update reserves what
/// it needs before the write and gets a [`Reservation`] that is undone unless the write
/// commits it.
pub trait WriteHooks<O>: Send + Sync + 'static {
    /// After validation of a create, before the write; may fill in allocated values.
    fn begin_create(&self, obj: &mut O, dry_run: bool) -> Result<Reservation, ApiError>;
    /// After validation of an update of the main resource, before the write.
    fn begin_update(&self, new: &mut O, old: &O, dry_run: bool) -> Result<Reservation, ApiError>;
    /// The object left storage.
    fn removed(&self, obj: &O);
    /// A write of `key` was stored at `revision` (`None`: deleted).
    fn wrote(&self, _key: &str, _value: Option<&[u8]>, _revision: Revision) {}
}

/// An admission plugin that must read other objects to decide (upstream's ServiceAccount
/// admission looks up the pod's account; NamespaceLifecycle, the namespace). Runs on
/// creates: [`Phase::Validate`] plugins once the object is valid, before anything is
/// reserved for it; [`Phase::Mutate`] plugins after the kind's own mutating admission;
/// [`Phase::Final`] plugins after every mutation, just before the write. It may change the
/// object or refuse it.
#[async_trait::async_trait]
pub trait CreateAdmission<O>: Send + Sync + 'static {
    fn phase(&self) -> Phase {
        Phase::Mutate
    }
    async fn admit(&self, obj: &mut O, dry_run: bool) -> Result<(), ApiError>;
}

/// An admission plugin for updates of the main resource that must read other objects
/// (ResourceQuota charging what an update adds): runs after external admission, on every
/// try of the update, with the object it replaces.
#[async_trait::async_trait]
pub trait UpdateAdmission<O>: Send + Sync + 'static {
    /// Whether the plugin sees updates of `part`: the main resource only, unless it says
    /// (PodSecurity judges pods' ephemeral containers too).
    fn admits(&self, part: Part) -> bool {
        part == Part::Main
    }
    async fn admit_update(&self, new: &mut O, old: &O, dry_run: bool) -> Result<(), ApiError>;
}

/// What a delete admission plugin sees: the object a client deletes, or whose subresource
/// it creates to have it deleted (a pod's `eviction`).
pub struct Removal<'a, O> {
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    /// The stored object; `None` when there is none (the plugin may answer that itself, as
    /// upstream's plugins do from their caches, before the registry's NotFound).
    pub current: Option<&'a O>,
    /// `eviction` for an eviction; `None` for a delete.
    pub subresource: Option<&'a str>,
}

/// An admission plugin for deletes (upstream's admission of DELETE, and of the subresources
/// that delete, such as a pod's eviction): runs before anything else looks at the delete.
#[async_trait::async_trait]
pub trait DeleteAdmission<O: Sync>: Send + Sync + 'static {
    async fn admit_delete(&self, removal: &Removal<'_, O>) -> Result<(), ApiError>;
}

/// When an admission plugin runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Validate,
    Mutate,
    /// Upstream's validating admission: it sees the object as it will be stored, every
    /// default filled in (LimitRanger's bounds, then ResourceQuota's charge, last).
    Final,
}

type Callback = Box<dyn FnOnce() + Send>;

/// What a write reserved: `commit` once the write is stored; dropped uncommitted, it reverts.
#[must_use]
#[derive(Default)]
pub struct Reservation {
    commit: Option<Callback>,
    revert: Option<Callback>,
}

impl Reservation {
    pub fn new(
        commit: impl FnOnce() + Send + 'static,
        revert: impl FnOnce() + Send + 'static,
    ) -> Self {
        Reservation {
            commit: Some(Box::new(commit)),
            revert: Some(Box::new(revert)),
        }
    }

    pub fn commit(mut self) {
        self.revert = None;
        if let Some(f) = self.commit.take() {
            f();
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(f) = self.revert.take() {
            f();
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    pub labels: Selector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct WatchQuery {
    pub labels: Selector,
    pub fields: FieldSelector,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub send_initial_events: Option<bool>,
    pub allow_bookmarks: bool,
    pub bookmark_interval: Duration,
}

pub struct ListOutput<T> {
    pub items: Vec<T>,
    pub resource_version: Revision,
    pub continue_token: Option<String>,
    pub remaining: Option<i64>,
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: Option<String>,
    pub preconditions: Option<Preconditions>,
    pub dry_run: bool,
}

/// The result of a delete: gone from storage, or still there with deletion pending.
pub enum Deleted<T> {
    Gone(T),
    Pending(T),
}

#[derive(Debug)]
pub enum WatchEvent<T> {
    Added(T),
    Modified(T),
    Deleted(T),
    Bookmark {
        resource_version: Revision,
        initial_events_end: bool,
    },
    Error(ApiError),
}

/// Continue tokens as upstream encodes them (URL-safe base64 of this JSON).
#[derive(Serialize, Deserialize)]
struct ContinueToken {
    v: String,
    rv: i64,
    start: String,
}

pub struct GenericRegistry<S: Strategy> {
    pub strategy: Arc<S>,
    store: DynStore,
    root: String,
    hooks: Option<Arc<dyn WriteHooks<S::Object>>>,
    admission: Vec<Arc<dyn CreateAdmission<S::Object>>>,
    update_admission: Vec<Arc<dyn UpdateAdmission<S::Object>>>,
    delete_admission: Vec<Arc<dyn DeleteAdmission<S::Object>>>,
    /// Admission webhooks and policies, for every write a client makes.
    pub(super) external: Option<super::external::DynExternalAdmission>,
    /// Adds the fields upstream's Go types always serialize (`status: {replicas: 0}`), set
    /// once by the endpoint of a built-in kind from its schema; `true` when it added any.
    pub zero_values: std::sync::OnceLock<ZeroValues>,
    /// The watch cache of the resource, started by the first read it serves.
    cache: std::sync::OnceLock<CacheHandle<S>>,
}

/// See [`GenericRegistry::zero_values`].
pub type ZeroValues = Box<dyn Fn(&mut serde_json::Value) -> bool + Send + Sync>;

/// The value of a field for field selectors: metadata fields, then the kind's own.
fn field_value<S: Strategy>(strategy: &S, obj: &S::Object, field: &str) -> Option<String> {
    let meta = strategy.meta(obj);
    match field {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        _ => strategy.field(obj, field),
    }
}

/// Whether an object is selected by `labels` and `fields`.
fn object_matches<S: Strategy>(
    strategy: &S,
    obj: &S::Object,
    labels: &Selector,
    fields: &FieldSelector,
) -> bool {
    selects(labels, fields, strategy.meta(obj).labels.as_ref(), |f| {
        field_value(strategy, obj, f)
    })
}

pub fn parse_rv(rv: &str) -> Result<Revision, ApiError> {
    rv.parse::<Revision>().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resource version: resourceVersion: Invalid value: {rv:?}: strconv.ParseUint: parsing {rv:?}: invalid syntax"
        ))
    })
}

/// A 422 about list or watch options, worded as upstream's ListOptions validation.
fn invalid_options(field: &str, detail: &str) -> ApiError {
    let err = FieldError::forbidden(&Path::new(field), detail);
    ApiError::invalid("ListOptions", "meta.k8s.io", "", &[err])
}

impl<S: Strategy> GenericRegistry<S> {
    pub fn new(strategy: S, store: DynStore) -> Self {
        let root = strategy.key_root();
        GenericRegistry {
            strategy: Arc::new(strategy),
            store,
            root,
            hooks: None,
            admission: Vec::new(),
            update_admission: Vec::new(),
            delete_admission: Vec::new(),
            external: None,
            zero_values: Default::default(),
            cache: Default::default(),
        }
    }

    pub fn with_hooks(mut self, hooks: Arc<dyn WriteHooks<S::Object>>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    pub fn with_admission(mut self, plugin: Arc<dyn CreateAdmission<S::Object>>) -> Self {
        self.admission.push(plugin);
        self
    }

    pub fn with_update_admission(mut self, plugin: Arc<dyn UpdateAdmission<S::Object>>) -> Self {
        self.update_admission.push(plugin);
        self
    }

    pub fn with_delete_admission(mut self, plugin: Arc<dyn DeleteAdmission<S::Object>>) -> Self {
        self.delete_admission.push(plugin);
        self
    }

    /// Runs the delete admission plugins for a delete of `name` (`subresource: None`) or a
    /// subresource write that deletes it (`eviction`), reading the object only when a
    /// plugin is there to see it.
    pub async fn admit_removal(
        &self,
        ns: Option<&str>,
        name: &str,
        subresource: Option<&str>,
    ) -> Result<(), ApiError> {
        if self.delete_admission.is_empty() {
            return Ok(());
        }
        let current = match self.get(ns, name).await {
            Ok(o) => Some(o),
            Err(e) if e.code == 404 => None,
            Err(e) => return Err(e),
        };
        self.admit_delete_internal(ns, name, current.as_ref(), subresource)
            .await
    }

    async fn admit_delete_internal(
        &self,
        namespace: Option<&str>,
        name: &str,
        current: Option<&S::Object>,
        subresource: Option<&str>,
    ) -> Result<(), ApiError> {
        let removal = Removal {
            namespace,
            name,
            current,
            subresource,
        };
        for plugin in &self.delete_admission {
            plugin.admit_delete(&removal).await?;
        }
        Ok(())
    }

    pub fn with_external_admission(
        mut self,
        external: super::external::DynExternalAdmission,
    ) -> Self {
        self.external = Some(external);
        self
    }

    fn removed(&self, obj: &S::Object) {
        if let Some(h) = &self.hooks {
            h.removed(obj);
        }
    }

    pub fn store(&self) -> &DynStore {
        &self.store
    }

    fn namespaced(&self) -> bool {
        self.strategy.info().namespaced
    }

    pub fn target<'a>(&'a self, name: &'a str) -> Target<'a> {
        let info = self.strategy.info();
        Target {
            group: &info.group,
            resource: &info.plural,
            name,
        }
    }

    pub fn key(&self, ns: Option<&str>, name: &str) -> String {
        match ns.filter(|_| self.namespaced()) {
            Some(ns) => format!("{}{ns}/{name}", self.root),
            None => format!("{}{name}", self.root),
        }
    }

    fn prefix(&self, ns: Option<&str>) -> String {
        match ns.filter(|_| self.namespaced()) {
            Some(ns) => format!("{}{ns}/", self.root),
            None => self.root.clone(),
        }
    }

    fn store_error(&self, name: &str, e: StoreError) -> ApiError {
        match e {
            StoreError::AlreadyExists(_) => ApiError::already_exists(self.target(name)),
            StoreError::NotFound(_) => ApiError::not_found(self.target(name)),
            StoreError::Conflict { .. } => ApiError::stale(self.target(name)),
            StoreError::Compacted {
                requested,
                compacted,
            } => ApiError::expired(format!(
                "too old resource version: {requested} ({compacted})"
            )),
            StoreError::FutureRevision { requested, current } => {
                ApiError::too_large_resource_version(requested, current)
            }
            StoreError::ValueTooLarge { size, limit } => ApiError::request_entity_too_large(
                format!("object of {size} bytes is larger than the storage limit of {limit} bytes"),
            ),
            StoreError::Backend(msg) => {
                tracing::error!(error = %msg, "storage failure");
                ApiError::internal(format!("storage: {msg}"))
            }
        }
    }

    /// Decodes a stored value and puts its revision back as resourceVersion.
    pub fn decode(&self, kv: &KeyValue) -> Result<S::Object, ApiError> {
        let mut obj = self
            .strategy
            .decode_stored(&kv.value)
            .map_err(|e| ApiError::internal(format!("corrupt object at {}: {e}", kv.key)))?;
        self.strategy.meta_mut(&mut obj).resource_version = Some(kv.mod_revision.to_string());
        Ok(obj)
    }

    fn encode(&self, obj: &S::Object) -> Result<Bytes, ApiError> {
        let mut obj = obj.clone();
        self.strategy.meta_mut(&mut obj).resource_version = None;
        self.strategy
            .encode_stored(&obj)
            .map(Bytes::from)
            .map_err(ApiError::internal)
    }

    /// The object as upstream would serialize it: with its Go zero values (see
    /// [`Self::zero_values`]). Written objects get them, so every read shows them.
    fn with_zero_values(&self, obj: &mut S::Object) -> Result<(), ApiError> {
        let Some(fill) = self.zero_values.get() else {
            return Ok(());
        };
        let mut v = serde_json::to_value(&*obj).map_err(ApiError::internal)?;
        if fill(&mut v) {
            *obj = serde_json::from_value(v).map_err(ApiError::internal)?;
        }
        Ok(())
    }

    pub(super) fn name_of(&self, obj: &S::Object) -> String {
        self.strategy.meta(obj).name.clone().unwrap_or_default()
    }

    pub(super) fn invalid(&self, name: &str, errs: &[FieldError]) -> ApiError {
        let info = self.strategy.info();
        ApiError::invalid(&info.kind, &info.group, name, errs)
    }

    pub async fn get(&self, ns: Option<&str>, name: &str) -> Result<S::Object, ApiError> {
        match self.store.get(&self.key(ns, name)).await {
            Ok(Some(kv)) => self.decode(&kv),
            Ok(None) => Err(ApiError::not_found(self.target(name))),
            Err(e) => Err(self.store_error(name, e)),
        }
    }

    /// The value of a field for field selectors: metadata fields, then the kind's own.
    pub fn field_value(&self, obj: &S::Object, field: &str) -> Option<String> {
        field_value(self.strategy.as_ref(), obj, field)
    }

    /// Rejects field selectors on fields this kind does not index.
    pub fn check_fields(&self, fields: &FieldSelector) -> Result<(), ApiError> {
        for t in &fields.terms {
            let generic = t.field == "metadata.name"
                || (t.field == "metadata.namespace" && self.namespaced());
            if !generic && !self.strategy.supports_field(&t.field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {}",
                    t.field
                )));
            }
        }
        Ok(())
    }

    fn matches(&self, obj: &S::Object, labels: &Selector, fields: &FieldSelector) -> bool {
        object_matches(self.strategy.as_ref(), obj, labels, fields)
    }

    /// The resource's watch cache, started on first use.
    fn cache(&self) -> &Arc<WatchCache<S>> {
        &self.cache_handle().cache
    }

    fn cache_handle(&self) -> &CacheHandle<S> {
        self.cache.get_or_init(|| {
            let strategy = self.strategy.clone();
            let mut names = vec![
                "metadata.name".to_string(),
                "metadata.namespace".to_string(),
            ];
            names.extend(strategy.selectable_fields());
            WatchCache::start(
                self.strategy.clone(),
                Arc::new(move |obj| Attrs {
                    labels: strategy.meta(obj).labels.clone(),
                    fields: names
                        .iter()
                        .map(|f| (f.clone(), field_value(strategy.as_ref(), obj, f)))
                        .collect(),
                }),
                self.store.clone(),
                self.root.clone(),
            )
        })
    }

    fn cache_filter(&self, ns: Option<&str>, labels: &Selector, fields: &FieldSelector) -> Filter {
        Filter {
            prefix: self.prefix(ns),
            labels: labels.clone(),
            fields: fields.clone(),
        }
    }

    /// LIST as the handler serves it: from the watch cache where upstream serves lists from
    /// its cache (any version, `NotOlderThan`, and the newest state without a limit), else
    /// from the store.
    pub async fn list_shared(
        &self,
        ns: Option<&str>,
        q: &ListQuery,
    ) -> Result<ListOutput<Arc<Cached<S::Object>>>, ApiError> {
        self.check_fields(&q.fields)?;
        let rv = q.resource_version.as_deref().filter(|rv| !rv.is_empty());
        let rv_match = q
            .resource_version_match
            .as_deref()
            .filter(|m| !m.is_empty());
        let paged = q.limit.is_some_and(|l| l > 0) || q.continue_token.is_some();
        let min_revision = match (rv, rv_match) {
            _ if q.continue_token.is_some() => None,
            (Some("0"), None) => Some(1),
            (Some(rv), Some("NotOlderThan")) => Some(parse_rv(rv)?.max(1)),
            (Some(rv), None) if !paged => Some(parse_rv(rv)?.max(1)),
            // A consistent read: the cache once it has what the store has now.
            (None, None) if !paged => Some(
                self.store
                    .current_revision()
                    .await
                    .map_err(|e| self.store_error("", e))?
                    .max(1),
            ),
            _ => None,
        };
        let Some(min_revision) = min_revision else {
            let out = self.list(ns, q).await?;
            return Ok(ListOutput {
                items: out.items.into_iter().map(Cached::new).collect(),
                resource_version: out.resource_version,
                continue_token: out.continue_token,
                remaining: out.remaining,
            });
        };
        // metadata.namespace narrows an all-namespaces list.
        let ns = match (ns, q.fields.required_value("metadata.namespace")) {
            (None, Some(n)) if self.namespaced() => Some(n),
            (ns, _) => ns,
        };
        let filter = self.cache_filter(ns, &q.labels, &q.fields);
        let consistent = rv.is_none() && rv_match.is_none();
        let (items, resource_version) = match self.cache().list(&filter, min_revision).await {
            Ok(listed) => {
                if consistent {
                    count_consistent_read(self.cache().resource(), true, false);
                }
                listed
            }
            // A cache that has not caught up with the store in time: a consistent read is
            // served by the store instead, as upstream's Cacher falls back to etcd (else every
            // client's relist fails with 504 for as long as the cache lags).
            Err(_) if consistent => {
                let out = self.list(ns, q).await;
                count_consistent_read(self.cache().resource(), out.is_ok(), true);
                let out = out?;
                return Ok(ListOutput {
                    items: out.items.into_iter().map(Cached::new).collect(),
                    resource_version: out.resource_version,
                    continue_token: out.continue_token,
                    remaining: out.remaining,
                });
            }
            Err(e) => return Err(e),
        };
        Ok(ListOutput {
            items,
            resource_version,
            continue_token: None,
            remaining: None,
        })
    }

    /// Waits (briefly) until the store has reached `rev`, as reads with NotOlderThan do.
    pub async fn wait_for_revision(&self, rev: Revision) -> Result<(), ApiError> {
        let current = self
            .store
            .current_revision()
            .await
            .map_err(|e| self.store_error("", e))?;
        if current >= rev {
            return Ok(());
        }
        // Every write and progress report of the whole store passes by this watch.
        let mut changes = self
            .store
            .watch("/", current)
            .await
            .map_err(|e| self.store_error("", e))?;
        let reached = tokio::time::timeout(FUTURE_REVISION_WAIT, async {
            while let Some(item) = changes.next().await {
                match item {
                    Ok(event) if event.revision() >= rev => return true,
                    Ok(_) => {}
                    Err(_) => return false,
                }
            }
            false
        })
        .await;
        match reached {
            Ok(true) => Ok(()),
            _ => {
                let current = self
                    .store
                    .current_revision()
                    .await
                    .map_err(|e| self.store_error("", e))?;
                if current >= rev {
                    Ok(())
                } else {
                    Err(ApiError::too_large_resource_version(rev, current))
                }
            }
        }
    }

    pub async fn list(
        &self,
        ns: Option<&str>,
        q: &ListQuery,
    ) -> Result<ListOutput<S::Object>, ApiError> {
        self.check_fields(&q.fields)?;
        let rv_match = q
            .resource_version_match
            .as_deref()
            .filter(|m| !m.is_empty());
        if let Some(m) = rv_match {
            if !matches!(m, "Exact" | "NotOlderThan") {
                let err = FieldError::not_supported(
                    &Path::new("resourceVersionMatch"),
                    m,
                    &["Exact", "NotOlderThan", ""],
                );
                return Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", &[err]));
            }
            if q.continue_token.is_some() {
                return Err(invalid_options(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if q.resource_version.as_deref().is_none_or(str::is_empty) {
                return Err(invalid_options(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if m == "Exact" && q.resource_version.as_deref() == Some("0") {
                return Err(invalid_options(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        // metadata.namespace narrows an all-namespaces list.
        let ns_owned;
        let ns = match (ns, q.fields.required_value("metadata.namespace")) {
            (None, Some(n)) if self.namespaced() => {
                ns_owned = n.to_string();
                Some(ns_owned.as_str())
            }
            (ns, _) => ns,
        };
        let prefix = self.prefix(ns);
        let mut limit = q.limit.filter(|l| *l > 0);
        let (mut revision, mut after) = (None, None);
        if let Some(token) = q.continue_token.as_deref().filter(|t| !t.is_empty()) {
            if q.resource_version
                .as_deref()
                .is_some_and(|rv| !rv.is_empty() && rv != "0")
            {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let (rv, start) = self.decode_continue(token)?;
            revision = (rv > 0).then_some(rv);
            after = Some(format!("{}{start}", self.root));
        } else if let Some(rv) = q.resource_version.as_deref().filter(|rv| !rv.is_empty()) {
            if rv == "0" {
                // "Any" version: served from the newest state, every item in one page.
                limit = None;
            } else {
                let rev = parse_rv(rv)?;
                match rv_match {
                    Some("Exact") => revision = Some(rev),
                    None if limit.is_some() => revision = Some(rev),
                    _ => self.wait_for_revision(rev).await?,
                }
            }
        }
        let filtering = !q.labels.is_empty() || !q.fields.is_empty();
        let page = match limit {
            Some(l) if filtering => Some(l.max(500)),
            other => other,
        };
        let mut items = Vec::new();
        let mut list_rev = revision;
        let mut continue_key = None;
        let mut remaining = None;
        loop {
            let opts = ListOptions {
                prefix: prefix.clone(),
                after_key: after.clone(),
                limit: page,
                revision: list_rev,
            };
            let result = match self.store.list(opts).await {
                Ok(r) => r,
                Err(StoreError::Compacted { .. }) if q.continue_token.is_some() => {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                Err(StoreError::Compacted { .. }) => {
                    return Err(ApiError::expired(
                        "The resourceVersion for the provided list is too old.",
                    ));
                }
                Err(e) => return Err(self.store_error("", e)),
            };
            list_rev = Some(result.revision);
            let fetched = result.kvs.len();
            for (i, kv) in result.kvs.iter().enumerate() {
                let obj = self.decode(kv)?;
                after = Some(kv.key.clone());
                if filtering && !self.matches(&obj, &q.labels, &q.fields) {
                    continue;
                }
                items.push(obj);
                if limit.is_some_and(|l| items.len() >= l) {
                    let left = (fetched - i - 1) + result.remaining;
                    if left > 0 {
                        continue_key = Some(kv.key.clone());
                        if !filtering {
                            remaining = Some(left as i64);
                        }
                    }
                    break;
                }
            }
            let full = limit.is_some_and(|l| items.len() >= l);
            if full || result.remaining == 0 || page.is_none() {
                break;
            }
        }
        let resource_version = list_rev.unwrap_or_default();
        let continue_token = continue_key.map(|k| self.encode_continue(resource_version, &k));
        Ok(ListOutput {
            items,
            resource_version,
            continue_token,
            remaining,
        })
    }

    fn encode_continue(&self, rv: Revision, key: &str) -> String {
        let start = format!("{}\u{0}", key.strip_prefix(&self.root).unwrap_or(key));
        let token = ContinueToken {
            v: "meta.k8s.io/v1".into(),
            rv,
            start,
        };
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&token).expect("token serializes"))
    }

    fn decode_continue(&self, token: &str) -> Result<(Revision, String), ApiError> {
        let bad = |detail: &str| {
            ApiError::bad_request(format!(
                "invalid continue token: continue key is not valid: {detail}"
            ))
        };
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|e| bad(&e.to_string()))?;
        let t: ContinueToken = serde_json::from_slice(&raw).map_err(|e| bad(&e.to_string()))?;
        if t.v != "meta.k8s.io/v1" {
            return Err(bad(&format!(
                "server does not recognize this encoded version {}",
                t.v
            )));
        }
        if t.rv == 0 {
            return Err(bad(
                "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
            ));
        }
        let start = t
            .start
            .trim_end_matches('\u{0}')
            .trim_start_matches('/')
            .to_string();
        if start.is_empty() {
            return Err(bad("encoded start key empty (version meta.k8s.io/v1)"));
        }
        if start.split('/').any(|s| s == ".." || s == ".") {
            return Err(bad("continue key may not contain path traversal"));
        }
        Ok((t.rv, start))
    }

    /// Tells the hooks about a stored write.
    fn wrote(&self, key: &str, value: Option<&Bytes>, revision: Revision) {
        if let Some(h) = &self.hooks {
            h.wrote(key, value.map(|v| &v[..]), revision);
        }
    }

    /// Runs the admission plugins of `phase`.
    async fn run_admission(
        &self,
        phase: Phase,
        obj: &mut S::Object,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        for plugin in self.admission.iter().filter(|p| p.phase() == phase) {
            plugin.admit(obj, dry_run).await?;
        }
        Ok(())
    }

    /// Reconciles the namespace of the body with the request's (upstream's BeforeCreate rule).
    pub fn reconcile_namespace(
        &self,
        obj: &mut S::Object,
        ns: Option<&str>,
    ) -> Result<(), ApiError> {
        let namespaced = self.namespaced();
        let meta = self.strategy.meta_mut(obj);
        if !namespaced {
            meta.namespace = None;
            return Ok(());
        }
        match (meta.namespace.as_deref().filter(|n| !n.is_empty()), ns) {
            (None, Some(ns)) => meta.namespace = Some(ns.to_string()),
            (Some(body), Some(ns)) if body != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    fn tracks_generation(&self, obj: &S::Object) -> bool {
        self.strategy.spec_changed(obj, obj).is_some()
    }

    /// Create: system metadata, defaults, the kind's PrepareForCreate, validation, admission.
    pub async fn create(
        &self,
        ns: Option<&str>,
        obj: S::Object,
        dry_run: bool,
    ) -> Result<S::Object, ApiError> {
        self.create_tracked(ns, obj, dry_run, None).await
    }

    /// [`GenericRegistry::create`], recording managed fields with `track`.
    pub async fn create_tracked(
        &self,
        ns: Option<&str>,
        mut obj: S::Object,
        dry_run: bool,
        track: Track<'_, S::Object>,
    ) -> Result<S::Object, ApiError> {
        self.reconcile_namespace(&mut obj, ns)?;
        {
            let meta = self.strategy.meta_mut(&mut obj);
            if meta
                .resource_version
                .as_deref()
                .is_some_and(|rv| !rv.is_empty())
            {
                return Err(ApiError::bad_request(
                    "resourceVersion should not be set on objects to be created",
                ));
            }
            meta.creation_timestamp = None;
            meta.uid = None;
            meta.deletion_timestamp = None;
            meta.deletion_grace_period_seconds = None;
            meta.self_link = None;
        }
        let generated = {
            let meta = self.strategy.meta(&obj);
            meta.name.as_deref().is_none_or(str::is_empty)
                && meta.generate_name.as_deref().is_some_and(|g| !g.is_empty())
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut candidate = obj.clone();
            {
                let meta = self.strategy.meta_mut(&mut candidate);
                if generated {
                    meta.name = Some(meta::generate_name(
                        meta.generate_name.as_deref().unwrap_or_default(),
                    ));
                }
                meta.uid = Some(meta::new_uid());
                meta.creation_timestamp = Some(meta::now());
            }
            self.strategy.default_fields(&mut candidate);
            if self.tracks_generation(&candidate) {
                self.strategy.meta_mut(&mut candidate).generation = Some(1);
            }
            self.strategy.prepare_create(&mut candidate);
            let name = self.name_of(&candidate);
            let mut errs = self.strategy.validate(&candidate);
            if errs.is_empty() {
                let info = self.strategy.info();
                validate_object_meta(
                    self.strategy.meta(&candidate),
                    info.namespaced,
                    info.name_rule,
                    &mut errs,
                );
                if generated && let Some(g) = &self.strategy.meta(&candidate).generate_name {
                    let masked = g.strip_suffix('-').unwrap_or(g);
                    if !masked.is_empty() && !info.name_rule.check(masked).is_empty() {
                        errs.retain(|e| e.field != "metadata.name");
                        for e in info.name_rule.check(masked) {
                            errs.push(FieldError::invalid(
                                &Path::new("metadata").child("generateName"),
                                g,
                                e,
                            ));
                        }
                    }
                }
            }
            if !errs.is_empty() {
                return Err(self.invalid(&name, &errs));
            }
            self.run_admission(Phase::Validate, &mut candidate, dry_run)
                .await?;
            let reservation = match &self.hooks {
                Some(h) => h.begin_create(&mut candidate, dry_run)?,
                None => Reservation::default(),
            };
            if let Some(track) = track {
                track(&mut candidate, None);
            }
            // Mutating admission after field tracking, as upstream's create handler orders
            // them: what admission adds is owned by no manager.
            self.strategy.admit(&mut candidate);
            self.run_admission(Phase::Mutate, &mut candidate, dry_run)
                .await?;
            self.admit_create_external(&mut candidate, dry_run).await?;
            self.run_admission(Phase::Final, &mut candidate, dry_run)
                .await?;
            self.with_zero_values(&mut candidate)?;
            let key = self.key(self.strategy.meta(&candidate).namespace.as_deref(), &name);
            if dry_run {
                // As upstream's dry-run storage: a create that would collide says so.
                return match self.store.get(&key).await {
                    Ok(None) => Ok(candidate),
                    Ok(Some(kv)) => Err(self.already_exists(&name, Some(&kv))),
                    Err(e) => Err(self.store_error(&name, e)),
                };
            }
            let value = self.encode(&candidate)?;
            match self.store.create(&key, value).await {
                Ok(kv) => {
                    reservation.commit();
                    self.wrote(&key, Some(&kv.value), kv.mod_revision);
                    self.strategy.meta_mut(&mut candidate).resource_version =
                        Some(kv.mod_revision.to_string());
                    return Ok(candidate);
                }
                Err(StoreError::AlreadyExists(_)) if generated && attempts < 8 => continue,
                Err(StoreError::AlreadyExists(_)) if generated => {
                    let mut e = ApiError::already_exists(self.target(&name));
                    e.message.push_str(
                        ", the server was not able to generate a unique name for the object",
                    );
                    if let Some(d) = e.details.as_mut() {
                        d.retry_after_seconds = Some(1);
                    }
                    return Err(e);
                }
                Err(StoreError::AlreadyExists(_)) => {
                    let existing = self.store.get(&key).await.ok().flatten();
                    return Err(self.already_exists(&name, existing.as_ref()));
                }
                Err(e) => return Err(self.store_error(&name, e)),
            }
        }
    }

    /// 409 AlreadyExists for `name`, saying so when the `existing` object is being deleted.
    fn already_exists(&self, name: &str, existing: Option<&KeyValue>) -> ApiError {
        let mut e = ApiError::already_exists(self.target(name));
        if existing
            .and_then(|kv| self.decode(kv).ok())
            .is_some_and(|o| self.strategy.meta(&o).deletion_timestamp.is_some())
        {
            e.message = format!("object is being deleted: {}", e.message);
        }
        e
    }

    /// A patched object keeps the name and namespace of the URL (upstream's `checkName`).
    pub fn check_patched_name(
        &self,
        obj: &mut S::Object,
        ns: Option<&str>,
        name: &str,
    ) -> Result<(), ApiError> {
        let obj_name = self.strategy.meta(obj).name.clone().unwrap_or_default();
        if obj_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({obj_name}) does not match the name on the URL ({name})"
            )));
        }
        self.reconcile_namespace(obj, ns)
    }

    /// Upstream's BeforeUpdate: what an update may not change, defaults, generation, validation.
    pub fn before_update(
        &self,
        new: &mut S::Object,
        old: &S::Object,
        part: Part,
    ) -> Result<(), ApiError> {
        let name = self.name_of(old);
        let old_meta = self.strategy.meta(old).clone();
        {
            let meta = self.strategy.meta_mut(new);
            if let Some(uid) = meta.uid.as_deref().filter(|u| !u.is_empty())
                && Some(uid) != old_meta.uid.as_deref()
            {
                let msg = format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    old_meta.uid.clone().unwrap_or_default()
                );
                return Err(ApiError::conflict(self.target(&name), &msg));
            }
            meta.uid = old_meta.uid.clone();
            meta.creation_timestamp = old_meta.creation_timestamp.clone();
            if old_meta.deletion_timestamp.is_some() {
                meta.deletion_timestamp = old_meta.deletion_timestamp.clone();
            }
            if meta.deletion_grace_period_seconds.is_none() {
                meta.deletion_grace_period_seconds = old_meta.deletion_grace_period_seconds;
            }
            meta.generation = old_meta.generation;
            meta.resource_version = None;
            meta.self_link = None;
            if meta.managed_fields.is_none() {
                meta.managed_fields = old_meta.managed_fields.clone();
            }
        }
        let has_status = self.strategy.info().subresource("status").is_some();
        match part {
            Part::Main => {
                if has_status {
                    self.strategy.keep_status(new, old);
                }
                self.strategy.prepare_update(new, old);
            }
            Part::Status | Part::EphemeralContainers => {
                if part == Part::Status {
                    self.strategy.keep_spec(new, old);
                } else {
                    self.strategy.keep_all_but_ephemeral_containers(new, old);
                }
                let meta = self.strategy.meta_mut(new);
                meta.labels = old_meta.labels.clone();
                if !self.strategy.status_writes_annotations() {
                    meta.annotations = old_meta.annotations.clone();
                }
                meta.finalizers = old_meta.finalizers.clone();
                meta.owner_references = old_meta.owner_references.clone();
                meta.deletion_timestamp = old_meta.deletion_timestamp.clone();
            }
        }
        self.strategy.default_fields(new);
        if part == Part::Main {
            self.strategy.admit(new);
        }
        if part == Part::Main && self.strategy.spec_changed(new, old) == Some(true) {
            let meta = self.strategy.meta_mut(new);
            meta.generation = Some(old_meta.generation.unwrap_or(0) + 1);
        }
        let info = self.strategy.info();
        let new_meta = self.strategy.meta(new);
        let mut errs = Vec::new();
        validate_object_meta(new_meta, info.namespaced, info.name_rule, &mut errs);
        validate_object_meta_update(new_meta, &old_meta, &mut errs);
        if old_meta.deletion_timestamp.is_some() {
            let old_f = old_meta.finalizers.clone().unwrap_or_default();
            let added: Vec<&String> = new_meta
                .finalizers
                .iter()
                .flatten()
                .filter(|f| !old_f.contains(f))
                .collect();
            if !added.is_empty() {
                errs.push(FieldError::forbidden(
                    &Path::new("metadata").child("finalizers"),
                    format!("no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"),
                ));
            }
        }
        if part == Part::EphemeralContainers {
            errs.extend(self.strategy.validate_ephemeral_containers_update(new, old));
        } else {
            errs.extend(self.strategy.validate_update(new, old));
        }
        if !errs.is_empty() {
            return Err(self.invalid(&name, &errs));
        }
        Ok(())
    }

    /// Read-modify-write with optimistic concurrency, retried on races unless the caller
    /// pinned a resourceVersion. `update` gets the current object and returns the new one.
    /// Returns the stored object and whether it is now gone (finalized away).
    pub async fn guaranteed_update<F>(
        &self,
        ns: Option<&str>,
        name: &str,
        precondition: Option<Revision>,
        dry_run: bool,
        update: F,
    ) -> Result<(S::Object, bool), ApiError>
    where
        F: FnMut(S::Object) -> Result<S::Object, ApiError>,
    {
        self.guaranteed_update_admitted(ns, name, precondition, dry_run, None, update)
            .await
    }

    /// [`GenericRegistry::guaranteed_update`] of a client's update of `admit`: the new
    /// object goes through external admission on each try.
    pub(super) async fn guaranteed_update_admitted<F>(
        &self,
        ns: Option<&str>,
        name: &str,
        precondition: Option<Revision>,
        dry_run: bool,
        admit: Option<Part>,
        mut update: F,
    ) -> Result<(S::Object, bool), ApiError>
    where
        F: FnMut(S::Object) -> Result<S::Object, ApiError>,
    {
        let key = self.key(ns, name);
        loop {
            let kv = match self.store.get(&key).await {
                Ok(Some(kv)) => kv,
                Ok(None) => return Err(ApiError::not_found(self.target(name))),
                Err(e) => return Err(self.store_error(name, e)),
            };
            if precondition.is_some_and(|rv| rv != kv.mod_revision) {
                return Err(ApiError::stale(self.target(name)));
            }
            let current = self.decode(&kv)?;
            let mut new = update(current.clone())?;
            if let Some(part) = admit {
                self.admit_update_external(&mut new, &current, part, dry_run)
                    .await?;
                for plugin in self.update_admission.iter().filter(|p| p.admits(part)) {
                    plugin.admit_update(&mut new, &current, dry_run).await?;
                }
            }
            self.with_zero_values(&mut new)?;
            let reservation = match &self.hooks {
                Some(h) => h.begin_update(&mut new, &current, dry_run)?,
                None => Reservation::default(),
            };
            let value = self.encode(&new)?;
            // An unchanged object is not written again, unless it is stored under an older
            // encryption key (a rewrite after rotation must re-encrypt it).
            if value == kv.value
                && !self
                    .store
                    .stale(&kv)
                    .await
                    .map_err(|e| self.store_error(name, e))?
            {
                return Ok((current, false));
            }
            let meta = self.strategy.meta(&new);
            let finalize = meta.deletion_timestamp.is_some()
                && meta.finalizers.as_ref().is_none_or(|f| f.is_empty())
                && meta.deletion_grace_period_seconds.unwrap_or(0) == 0
                && self.strategy.finalized(&new);
            if dry_run {
                // As upstream's dry-run storage: the object as it would be, at the version
                // it replaces.
                self.strategy.meta_mut(&mut new).resource_version =
                    Some(kv.mod_revision.to_string());
                return Ok((new, finalize));
            }
            if finalize {
                match self.store.delete(&key, Some(kv.mod_revision)).await {
                    Ok((_, rev)) => {
                        drop(reservation);
                        self.wrote(&key, None, rev);
                        self.removed(&current);
                        self.strategy.meta_mut(&mut new).resource_version = Some(rev.to_string());
                        return Ok((new, true));
                    }
                    Err(StoreError::Conflict { .. }) if precondition.is_none() => continue,
                    Err(StoreError::NotFound(_)) => {
                        return Err(ApiError::not_found(self.target(name)));
                    }
                    Err(e) => return Err(self.store_error(name, e)),
                }
            }
            match self.store.update(&key, value, kv.mod_revision).await {
                Ok(stored) => {
                    reservation.commit();
                    self.wrote(&key, Some(&stored.value), stored.mod_revision);
                    self.strategy.meta_mut(&mut new).resource_version =
                        Some(stored.mod_revision.to_string());
                    return Ok((new, false));
                }
                Err(StoreError::Conflict { .. }) if precondition.is_none() => continue,
                Err(StoreError::NotFound(_)) => return Err(ApiError::not_found(self.target(name))),
                Err(e) => return Err(self.store_error(name, e)),
            }
        }
    }

    /// PUT of a whole object (or its status). Returns the object and whether it was created.
    pub async fn update(
        &self,
        ns: Option<&str>,
        name: &str,
        body: S::Object,
        part: Part,
        dry_run: bool,
    ) -> Result<(S::Object, bool), ApiError> {
        self.update_tracked(ns, name, body, part, dry_run, None)
            .await
    }

    /// [`GenericRegistry::update`], recording managed fields with `track`.
    pub async fn update_tracked(
        &self,
        ns: Option<&str>,
        name: &str,
        mut body: S::Object,
        part: Part,
        dry_run: bool,
        track: Track<'_, S::Object>,
    ) -> Result<(S::Object, bool), ApiError> {
        self.reconcile_namespace(&mut body, ns)?;
        let meta = self.strategy.meta(&body);
        if meta.name.as_deref() != Some(name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta.name.clone().unwrap_or_default()
            )));
        }
        let precondition = match meta.resource_version.as_deref().filter(|rv| !rv.is_empty()) {
            Some(rv) => Some(parse_rv(rv)?),
            None if !self.strategy.allow_unconditional_update() => {
                let info = self.strategy.info();
                let err = FieldError::new(
                    minik8s_api::validation::ErrorKind::Invalid,
                    &Path::new("metadata").child("resourceVersion"),
                    Some("0x0".into()),
                    "must be specified for an update",
                );
                return Err(ApiError::invalid(&info.plural, &info.group, name, &[err]));
            }
            None => None,
        };
        let result = self
            .guaranteed_update_admitted(ns, name, precondition, dry_run, Some(part), |current| {
                let mut new = body.clone();
                // As a Go-typed body would be, so that comparing it with the stored object
                // (generation, what an update may change) sees no difference in zero values.
                self.with_zero_values(&mut new)?;
                self.before_update(&mut new, &current, part)?;
                if let Some(track) = track {
                    track(&mut new, Some(&current));
                }
                Ok(new)
            })
            .await;
        match result {
            Err(e)
                if e.code == 404
                    && part == Part::Main
                    && self.strategy.allow_create_on_update() =>
            {
                let mut body = body;
                self.strategy.meta_mut(&mut body).resource_version = None;
                Ok((self.create_tracked(ns, body, dry_run, track).await?, true))
            }
            Err(e) => Err(e),
            Ok((obj, _)) => Ok((obj, false)),
        }
    }

    /// PATCH: `apply` turns the current object's JSON into the patched JSON.
    pub async fn patch<F>(
        &self,
        ns: Option<&str>,
        name: &str,
        part: Part,
        dry_run: bool,
        apply: F,
    ) -> Result<S::Object, ApiError>
    where
        F: Fn(serde_json::Value) -> Result<serde_json::Value, ApiError>,
    {
        self.patch_tracked(ns, name, part, dry_run, apply, None)
            .await
    }

    /// [`GenericRegistry::patch`], recording managed fields with `track`.
    pub async fn patch_tracked<F>(
        &self,
        ns: Option<&str>,
        name: &str,
        part: Part,
        dry_run: bool,
        apply: F,
        track: Track<'_, S::Object>,
    ) -> Result<S::Object, ApiError>
    where
        F: Fn(serde_json::Value) -> Result<serde_json::Value, ApiError>,
    {
        let (obj, _) = self
            .guaranteed_update_admitted(ns, name, None, dry_run, Some(part), |current| {
                let current_rv = self.strategy.meta(&current).resource_version.clone();
                let json = serde_json::to_value(&current).map_err(ApiError::internal)?;
                let patched = apply(json)?;
                let mut new: S::Object = serde_json::from_value(patched).map_err(|e| {
                    ApiError::bad_request(format!(
                        "the patched object is not a valid {}: {e}",
                        self.strategy.info().kind
                    ))
                })?;
                let meta = self.strategy.meta_mut(&mut new);
                if let Some(rv) = meta.resource_version.as_deref().filter(|rv| !rv.is_empty())
                    && Some(rv) != current_rv.as_deref()
                {
                    return Err(ApiError::stale(self.target(name)));
                }
                self.check_patched_name(&mut new, ns, name)?;
                self.before_update(&mut new, &current, part)?;
                if let Some(track) = track {
                    track(&mut new, Some(&current));
                }
                Ok(new)
            })
            .await?;
        Ok(obj)
    }

    pub async fn delete(
        &self,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Deleted<S::Object>, ApiError> {
        let key = self.key(ns, name);
        if let Some(p) = &opts.propagation_policy
            && !matches!(p.as_str(), "Foreground" | "Background" | "Orphan")
        {
            let err = FieldError::not_supported(
                &Path::new("propagationPolicy"),
                p,
                &["Foreground", "Background", "Orphan", "nil"],
            );
            return Err(ApiError::invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                &[err],
            ));
        }
        loop {
            let kv = match self.store.get(&key).await {
                Ok(Some(kv)) => kv,
                Ok(None) => {
                    self.admit_delete_internal(ns, name, None, None).await?;
                    return Err(ApiError::not_found(self.target(name)));
                }
                Err(e) => return Err(self.store_error(name, e)),
            };
            let current = self.decode(&kv)?;
            self.admit_delete_internal(ns, name, Some(&current), None)
                .await?;
            let meta = self.strategy.meta(&current).clone();
            self.check_preconditions(&meta, opts.preconditions.as_ref(), name)?;
            if let Some(why) = self.strategy.deletion_forbidden(&current) {
                return Err(ApiError::forbidden(self.target(name), why));
            }
            self.admit_delete_external(&current, opts.dry_run).await?;
            let pending = meta.deletion_timestamp.is_some();
            let mut new = current.clone();
            // The propagation finalizers follow the request (upstream's
            // deletionFinalizersForGarbageCollection), until a graceful deletion is pending.
            let graceful_pending = pending && meta.deletion_grace_period_seconds.unwrap_or(0) > 0;
            let gc_policy = self.strategy.gc_policy();
            if !graceful_pending && gc_policy != GcPolicy::Unsupported {
                let existing = meta.finalizers.as_deref().unwrap_or_default();
                let (orphan, foreground) =
                    propagation_finalizers(opts.propagation_policy.as_deref(), existing, gc_policy);
                let finalizers = self
                    .strategy
                    .meta_mut(&mut new)
                    .finalizers
                    .get_or_insert_with(Vec::new);
                finalizers.retain(|f| f != ORPHAN_FINALIZER && f != FOREGROUND_FINALIZER);
                if orphan {
                    finalizers.push(ORPHAN_FINALIZER.into());
                }
                if foreground {
                    finalizers.push(FOREGROUND_FINALIZER.into());
                }
                if finalizers.is_empty() {
                    self.strategy.meta_mut(&mut new).finalizers = None;
                }
                let before: std::collections::BTreeSet<&String> = existing.iter().collect();
                let after: std::collections::BTreeSet<&String> = self
                    .strategy
                    .meta(&new)
                    .finalizers
                    .iter()
                    .flatten()
                    .collect();
                if before == after {
                    // Unchanged as a set: keep the stored order.
                    self.strategy.meta_mut(&mut new).finalizers = meta.finalizers.clone();
                }
            }
            let grace = match self.strategy.default_grace_period(&current) {
                Some(default) => {
                    let g = opts.grace_period_seconds.unwrap_or(default);
                    if g < 0 { 1 } else { g }
                }
                None => 0,
            };
            let stays = self.strategy.begin_delete(&mut new);
            let has_finalizers = self
                .strategy
                .meta(&new)
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty());
            let now = meta::now();
            let action = if pending {
                let existing = meta.deletion_grace_period_seconds.unwrap_or(0);
                if grace < existing {
                    // A shorter grace period brings the deadline forward.
                    let m = self.strategy.meta_mut(&mut new);
                    m.deletion_timestamp = Some(after_seconds(&now, grace));
                    m.deletion_grace_period_seconds = Some(grace);
                    if grace == 0 && !has_finalizers && !stays {
                        Action::Remove
                    } else {
                        Action::Update
                    }
                } else if existing == 0
                    && !has_finalizers
                    && !stays
                    && self.strategy.finalized(&new)
                {
                    Action::Remove
                } else if self.strategy.meta(&new).finalizers != meta.finalizers {
                    // A later delete changed the propagation finalizers.
                    Action::Update
                } else {
                    Action::Keep
                }
            } else if grace > 0 || has_finalizers || stays {
                let m = self.strategy.meta_mut(&mut new);
                m.deletion_timestamp = Some(after_seconds(&now, grace));
                m.deletion_grace_period_seconds = Some(grace);
                if let Some(g) = m.generation.filter(|g| *g > 0) {
                    m.generation = Some(g + 1);
                }
                Action::Update
            } else {
                Action::Remove
            };
            match action {
                Action::Keep => return Ok(Deleted::Pending(current)),
                Action::Update => {
                    if opts.dry_run {
                        return Ok(Deleted::Pending(new));
                    }
                    let value = self.encode(&new)?;
                    match self.store.update(&key, value, kv.mod_revision).await {
                        Ok(stored) => {
                            self.wrote(&key, Some(&stored.value), stored.mod_revision);
                            self.strategy.meta_mut(&mut new).resource_version =
                                Some(stored.mod_revision.to_string());
                            return Ok(Deleted::Pending(new));
                        }
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(StoreError::NotFound(_)) => {
                            return Err(ApiError::not_found(self.target(name)));
                        }
                        Err(e) => return Err(self.store_error(name, e)),
                    }
                }
                Action::Remove => {
                    if opts.dry_run {
                        return Ok(Deleted::Gone(current));
                    }
                    match self.store.delete(&key, Some(kv.mod_revision)).await {
                        Ok((_, rev)) => {
                            self.wrote(&key, None, rev);
                            self.removed(&current);
                            return Ok(Deleted::Gone(current));
                        }
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(StoreError::NotFound(_)) => {
                            return Err(ApiError::not_found(self.target(name)));
                        }
                        Err(e) => return Err(self.store_error(name, e)),
                    }
                }
            }
        }
    }

    fn check_preconditions(
        &self,
        meta: &ObjectMeta,
        pre: Option<&Preconditions>,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(pre) = pre else { return Ok(()) };
        let info = self.strategy.info();
        let kind_target = Target {
            group: &info.group,
            resource: &info.kind,
            name,
        };
        if let Some(uid) = pre.uid.as_deref()
            && Some(uid) != meta.uid.as_deref()
        {
            let mut e = ApiError::conflict(
                kind_target,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    meta.uid.clone().unwrap_or_default()
                ),
            );
            if let Some(d) = e.details.as_mut() {
                d.kind = Some(info.kind.clone());
            }
            return Err(e);
        }
        if let Some(rv) = pre.resource_version.as_deref()
            && Some(rv) != meta.resource_version.as_deref()
        {
            return Err(ApiError::conflict(
                kind_target,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                    meta.resource_version.clone().unwrap_or_default()
                ),
            ));
        }
        Ok(())
    }

    /// Watch as upstream: optional replay of the current state, then every change, with
    /// selector transitions turned into ADDED/DELETED. Served by the watch cache unless the
    /// start is older than its window; then from the store's history.
    pub async fn watch(
        self: &Arc<Self>,
        ns: Option<&str>,
        q: WatchQuery,
    ) -> Result<BoxStream<'static, WatchEvent<Arc<Cached<S::Object>>>>, ApiError> {
        self.check_fields(&q.fields)?;
        let rv_match = q
            .resource_version_match
            .as_deref()
            .filter(|m| !m.is_empty());
        if q.send_initial_events.is_some() && rv_match != Some("NotOlderThan") {
            return Err(invalid_options(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if let Some(m) = rv_match {
            if q.send_initial_events.is_none() {
                return Err(invalid_options(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != "NotOlderThan" {
                let err = FieldError::not_supported(
                    &Path::new("resourceVersionMatch"),
                    m,
                    &["NotOlderThan"],
                );
                return Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", &[err]));
            }
        }
        let rv = q
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty() && *rv != "0")
            .map(parse_rv)
            .transpose()?;
        // In 1.32 a watch from "" or "0" replays the current state first (WatchList default).
        let replay = q.send_initial_events.unwrap_or(rv.is_none());
        let cache = self.cache();
        let start = match (replay, rv) {
            (true, Some(rv)) => {
                if cache.wait_for(rv).await.is_none() {
                    return Err(ApiError::too_large_resource_version(rv, rv - 1));
                }
                Start::Replay
            }
            (true, None) => Start::Replay,
            (false, Some(rv)) => {
                // The window may reach further back than the store's history; a start the
                // store has compacted away is still a 410, as it was before the cache.
                let compacted = self
                    .store
                    .compacted_revision()
                    .await
                    .map_err(|e| self.store_error("", e))?;
                if rv < compacted {
                    return self.watch_store(ns, q).await;
                }
                Start::After(rv)
            }
            (false, None) => Start::After(
                self.store
                    .current_revision()
                    .await
                    .map_err(|e| self.store_error("", e))?,
            ),
        };
        let filter = self.cache_filter(ns, &q.labels, &q.fields);
        let bookmarks = q.allow_bookmarks.then_some(q.bookmark_interval);
        let Some(sub) = cache.watch(filter, start, bookmarks).await? else {
            return self.watch_store(ns, q).await;
        };
        let delivered = |d: Delivered<S::Object>| match d {
            Delivered::Added(o) => WatchEvent::Added(o),
            Delivered::Modified(o) => WatchEvent::Modified(o),
            Delivered::Deleted(o) => WatchEvent::Deleted(o),
            Delivered::Bookmark(rev) => WatchEvent::Bookmark {
                resource_version: rev,
                initial_events_end: false,
            },
        };
        let end = (replay && q.allow_bookmarks).then_some(WatchEvent::Bookmark {
            resource_version: sub.revision,
            initial_events_end: true,
        });
        let keepalive = self.cache_handle().keepalive();
        Ok(
            futures::stream::iter(sub.initial.into_iter().map(delivered))
                .chain(futures::stream::iter(end))
                .chain(sub.live.map(move |d| {
                    let _held = &keepalive;
                    delivered(d)
                }))
                .boxed(),
        )
    }

    /// A watch from the store's history, for starts older than the watch cache's window.
    async fn watch_store(
        self: &Arc<Self>,
        ns: Option<&str>,
        q: WatchQuery,
    ) -> Result<BoxStream<'static, WatchEvent<Arc<Cached<S::Object>>>>, ApiError> {
        let start = match q
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty() && *rv != "0")
        {
            Some(rv) => parse_rv(rv)?,
            None => self
                .store
                .current_revision()
                .await
                .map_err(|e| self.store_error("", e))?,
        };
        let (tx, rx) = mpsc::channel::<WatchEvent<S::Object>>(256);
        let stream = match self.store.watch(&self.prefix(ns), start).await {
            Ok(s) => s,
            Err(StoreError::Compacted {
                requested,
                compacted,
            }) => {
                let gone = WatchEvent::Error(ApiError::expired(format!(
                    "too old resource version: {requested} ({compacted})"
                )));
                return Ok(futures::stream::once(async move { gone }).boxed());
            }
            Err(StoreError::FutureRevision { requested, current }) => {
                return Err(ApiError::too_large_resource_version(requested, current));
            }
            Err(e) => return Err(self.store_error("", e)),
        };
        let this = self.clone();
        tokio::spawn(async move { this.feed(stream, q, tx).await });
        Ok(tokio_stream::wrappers::ReceiverStream::new(rx)
            .map(|e| match e {
                WatchEvent::Added(o) => WatchEvent::Added(Cached::new(o)),
                WatchEvent::Modified(o) => WatchEvent::Modified(Cached::new(o)),
                WatchEvent::Deleted(o) => WatchEvent::Deleted(Cached::new(o)),
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                } => WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                },
                WatchEvent::Error(e) => WatchEvent::Error(e),
            })
            .boxed())
    }

    async fn feed(
        &self,
        mut stream: crate::storage::WatchStream,
        q: WatchQuery,
        tx: mpsc::Sender<WatchEvent<S::Object>>,
    ) {
        let mut last_bookmark = Instant::now();
        let filtering = !q.labels.is_empty() || !q.fields.is_empty();
        loop {
            let item = tokio::select! {
                item = stream.next() => item,
                _ = tx.closed() => return,
            };
            let event = match item {
                None => return,
                Some(Err(StoreError::Compacted {
                    requested,
                    compacted,
                })) => WatchEvent::Error(ApiError::expired(format!(
                    "too old resource version: {requested} ({compacted})"
                ))),
                Some(Err(e)) => WatchEvent::Error(self.store_error("", e)),
                Some(Ok(Event::Progress(rev))) => {
                    if !q.allow_bookmarks || last_bookmark.elapsed() < q.bookmark_interval {
                        continue;
                    }
                    last_bookmark = Instant::now();
                    WatchEvent::Bookmark {
                        resource_version: rev,
                        initial_events_end: false,
                    }
                }
                Some(Ok(Event::Put { kv, prev })) => {
                    let obj = match self.decode(&kv) {
                        Ok(o) => o,
                        Err(e) => {
                            let _ = tx.send(WatchEvent::Error(e)).await;
                            return;
                        }
                    };
                    let now_matches = !filtering || self.matches(&obj, &q.labels, &q.fields);
                    let was_matching = match &prev {
                        None => false,
                        Some(p) if filtering => self
                            .decode(p)
                            .map(|o| self.matches(&o, &q.labels, &q.fields))
                            .unwrap_or(false),
                        Some(_) => true,
                    };
                    match (was_matching, now_matches) {
                        (false, true) => WatchEvent::Added(obj),
                        (true, true) => WatchEvent::Modified(obj),
                        (true, false) => {
                            // Leaving the selection looks like a delete of the old state.
                            let mut old = match prev.as_ref().map(|p| self.decode(p)) {
                                Some(Ok(o)) => o,
                                _ => continue,
                            };
                            self.strategy.meta_mut(&mut old).resource_version =
                                Some(kv.mod_revision.to_string());
                            WatchEvent::Deleted(old)
                        }
                        (false, false) => continue,
                    }
                }
                Some(Ok(Event::Delete { prev, revision })) => {
                    let mut obj = match self.decode(&prev) {
                        Ok(o) => o,
                        Err(e) => {
                            let _ = tx.send(WatchEvent::Error(e)).await;
                            return;
                        }
                    };
                    if filtering && !self.matches(&obj, &q.labels, &q.fields) {
                        continue;
                    }
                    self.strategy.meta_mut(&mut obj).resource_version = Some(revision.to_string());
                    WatchEvent::Deleted(obj)
                }
            };
            let is_error = matches!(event, WatchEvent::Error(_));
            if tx.send(event).await.is_err() || is_error {
                return;
            }
        }
    }

    /// The current state as objects, for DELETE of a collection.
    pub async fn delete_collection(
        &self,
        ns: Option<&str>,
        q: &ListQuery,
        opts: &DeleteOpts,
    ) -> Result<ListOutput<S::Object>, ApiError> {
        let list = self.list(ns, q).await?;
        for obj in &list.items {
            let meta = self.strategy.meta(obj);
            let name = meta.name.clone().unwrap_or_default();
            match self.delete(meta.namespace.as_deref(), &name, opts).await {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(ListOutput {
            items: list.items,
            resource_version: list.resource_version,
            continue_token: None,
            remaining: None,
        })
    }
}

enum Action {
    Keep,
    Update,
    Remove,
}

const ORPHAN_FINALIZER: &str = "orphan";
const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// Whether a delete leaves the `orphan` and the `foregroundDeletion` finalizer on the object
/// (upstream's shouldOrphanDependents and shouldDeleteDependents): the request's policy
/// first, then the finalizers already there, then the kind's default.
fn propagation_finalizers(
    policy: Option<&str>,
    existing: &[String],
    default: GcPolicy,
) -> (bool, bool) {
    match policy {
        Some("Orphan") => return (true, false),
        Some("Foreground") => return (false, true),
        Some("Background") => return (false, false),
        _ => {}
    }
    for f in existing {
        match f.as_str() {
            ORPHAN_FINALIZER => return (true, false),
            FOREGROUND_FINALIZER => return (false, true),
            _ => {}
        }
    }
    (default == GcPolicy::OrphanDependents, false)
}

fn after_seconds(now: &Time, seconds: i64) -> Time {
    Time(
        now.0
            .checked_add(jiff::SignedDuration::from_secs(seconds))
            .unwrap_or(now.0),
    )
}

#[cfg(test)]
mod tests {
    use super::{GcPolicy, propagation_finalizers};

    #[test]
    fn propagation_finalizers_follow_request_then_object_then_kind() {
        let none: &[String] = &[];
        let orphan = ["orphan".to_string()];
        let fg = ["foregroundDeletion".to_string()];
        let default = GcPolicy::DeleteDependents;
        assert_eq!(propagation_finalizers(None, none, default), (false, false));
        assert_eq!(
            propagation_finalizers(Some("Orphan"), &fg, default),
            (true, false)
        );
        assert_eq!(
            propagation_finalizers(Some("Background"), &orphan, default),
            (false, false)
        );
        assert_eq!(propagation_finalizers(None, &fg, default), (false, true));
        assert_eq!(
            propagation_finalizers(None, none, GcPolicy::OrphanDependents),
            (true, false)
        );
        assert_eq!(
            propagation_finalizers(Some("Foreground"), none, GcPolicy::OrphanDependents),
            (false, true)
        );
    }
}
