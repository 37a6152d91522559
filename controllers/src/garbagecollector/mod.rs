//! The garbage collector (upstream's pkg/controller/garbagecollector): deletes objects whose
//! owners are gone, and carries out the `foregroundDeletion` and `orphan` finalizers the API
//! server puts on owners deleted with those propagation policies.
//!
//! It must see every kind, including custom resources created after it started, so it
//! discovers the API (again every 30 s and whenever a CRD changes) and runs one metadata-only
//! watch per resource that can be listed, watched and deleted. The watches feed one ownership
//! graph; the workers decide from live reads (an owner counts as gone only if a GET by name
//! finds nothing or an object with another uid), never from the graph alone, because the graph
//! may lag behind the API.

mod graph;
mod queue;

use std::collections::{HashMap, HashSet};
use std::pin::pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, PartialObjectMeta, Patch, PatchParams,
    Preconditions, PropagationPolicy,
};
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::AbortHandle;

use graph::{Change, FOREGROUND, Graph, Identity, ORPHAN, Observed, ResourceKey, Work};
use queue::WorkQueue;

use crate::util::reconciler::{self, guarded};
use kube::runtime::controller::Action;

/// Upstream re-checks discovery this often (ResourceResyncTime).
const RESYNC: Duration = Duration::from_secs(30);
const DELETE_WORKERS: usize = 4;
const ORPHAN_WORKERS: usize = 2;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("no served resource for {kind} in {api_version}")]
    UnknownKind { api_version: String, kind: String },
}

/// Upstream's RESTMapper, reduced to what the collector asks: the resource of a kind.
#[derive(Default)]
struct Mapper {
    kinds: HashMap<(String, String), Vec<(ApiResource, bool)>>,
}

impl Mapper {
    fn resolve_group_kind(&self, group: &str, kind: &str) -> Option<&(ApiResource, bool)> {
        self.kinds
            .get(&(group.to_string(), kind.to_string()))?
            .first()
    }

    fn resolve(&self, api_version: &str, kind: &str) -> Option<(ApiResource, bool)> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let served = self.kinds.get(&(group.to_string(), kind.to_string()))?;
        served
            .iter()
            .find(|(ar, _)| ar.version == version)
            .or(served.first())
            .cloned()
    }
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// The resources the collector watches, and how to reach any kind.
fn discover(discovery: &Discovery) -> (Mapper, Vec<ApiResource>) {
    let mut mapper = Mapper::default();
    let mut watched = Vec::new();
    for group in discovery.groups() {
        for version in group.versions() {
            for (ar, caps) in group.versioned_resources(version) {
                mapper
                    .kinds
                    .entry((ar.group.clone(), ar.kind.clone()))
                    .or_default()
                    .push((ar, caps.scope == Scope::Namespaced));
            }
        }
        for (ar, caps) in group.recommended_resources() {
            let ignored =
                ar.plural == "events" && matches!(ar.group.as_str(), "" | "events.k8s.io");
            if !ignored
                && [verbs::LIST, verbs::WATCH, verbs::DELETE]
                    .iter()
                    .all(|v| caps.supports_operation(v))
            {
                watched.push(ar);
            }
        }
    }
    (mapper, watched)
}

fn resource_key(ar: &ApiResource) -> ResourceKey {
    format!("{}/{}", ar.api_version, ar.plural)
}

#[derive(Clone, Copy, Debug)]
enum Job {
    Delete,
    Orphan,
}

struct Collector {
    client: Client,
    graph: Mutex<Graph>,
    mapper: RwLock<Mapper>,
    attempt_to_delete: WorkQueue,
    attempt_to_orphan: WorkQueue,
    /// Resources whose first list is still outstanding; workers start once it is empty, so
    /// orphaning never misses a dependent that is merely not listed yet.
    unsynced: Mutex<Option<HashSet<ResourceKey>>>,
    ready: watch::Sender<bool>,
}

/// Runs the garbage collector until dropped.
pub async fn run(client: Client) {
    let (ready, _) = watch::channel(false);
    let gc = Arc::new(Collector {
        client,
        graph: Mutex::default(),
        mapper: RwLock::default(),
        attempt_to_delete: WorkQueue::named("garbage_collector_attempt_to_delete"),
        attempt_to_orphan: WorkQueue::named("garbage_collector_attempt_to_orphan"),
        unsynced: Mutex::new(None),
        ready,
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(gc.clone().build_graph(rx));
    tasks.spawn(gc.clone().discover_and_watch(tx));
    for _ in 0..DELETE_WORKERS {
        tasks.spawn(gc.clone().worker(Job::Delete));
    }
    for _ in 0..ORPHAN_WORKERS {
        tasks.spawn(gc.clone().worker(Job::Orphan));
    }
    while tasks.join_next().await.is_some() {}
}

impl Collector {
    fn enqueue(&self, work: Work) {
        for uid in work.attempt_to_delete {
            self.attempt_to_delete.add(&uid);
        }
        for uid in work.attempt_to_orphan {
            self.attempt_to_orphan.add(&uid);
        }
    }

    async fn build_graph(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Change>) {
        while let Some(change) = rx.recv().await {
            if let Change::Relisted(key, _) = &change {
                let mut unsynced = self.unsynced.lock().expect("lock");
                if let Some(pending) = unsynced.as_mut() {
                    pending.remove(key);
                    if pending.is_empty() {
                        *unsynced = None;
                        self.ready.send_replace(true);
                    }
                }
            }
            let work = self.graph.lock().expect("graph lock").apply(change);
            self.enqueue(work);
        }
    }

    /// Keeps one metadata watch per discovered resource; re-discovers periodically and when
    /// a CRD changes.
    async fn discover_and_watch(self: Arc<Self>, tx: mpsc::UnboundedSender<Change>) {
        let crd_changed = Arc::new(Notify::new());
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let (crd_cache, writer) = reflector::store();
        let notify = crd_changed.clone();
        let crd_watch = tokio::spawn(async move {
            let events = reflector(writer, watcher::watcher(crds, watcher::Config::default()));
            let mut events = pin!(events.default_backoff());
            while let Some(event) = events.next().await {
                if matches!(event, Ok(Event::Apply(_) | Event::Delete(_))) {
                    notify.notify_one();
                }
            }
        });
        let _abort_crd_watch = AbortOnDrop(crd_watch.abort_handle());
        let mut monitors: HashMap<ResourceKey, AbortOnDrop> = HashMap::new();
        let mut first = true;
        loop {
            let wait = match Discovery::new(self.client.clone()).run().await {
                Ok(discovery) => {
                    let (mapper, watched) = discover(&discovery);
                    // An established CRD shows in discovery a moment later: look again soon.
                    let lagging = crd_cache.state().iter().any(|crd| {
                        established(crd)
                            && mapper
                                .resolve_group_kind(&crd.spec.group, &crd.spec.names.kind)
                                .is_none()
                    });
                    *self.mapper.write().expect("mapper lock") = mapper;
                    let keys: HashSet<ResourceKey> = watched.iter().map(resource_key).collect();
                    if first {
                        first = false;
                        if keys.is_empty() {
                            self.ready.send_replace(true);
                        } else {
                            *self.unsynced.lock().expect("lock") = Some(keys.clone());
                        }
                    }
                    monitors.retain(|key, _| {
                        let keep = keys.contains(key);
                        if !keep {
                            tracing::info!(resource = %key, "resource gone; stopped watching it");
                            let _ = tx.send(Change::Relisted(key.clone(), HashSet::new()));
                        }
                        keep
                    });
                    for ar in watched {
                        let key = resource_key(&ar);
                        if let std::collections::hash_map::Entry::Vacant(slot) = monitors.entry(key)
                        {
                            tracing::debug!(resource = %slot.key(), "watching");
                            let task = tokio::spawn(monitor(self.client.clone(), ar, tx.clone()));
                            slot.insert(AbortOnDrop(task.abort_handle()));
                        }
                    }
                    if lagging {
                        Duration::from_millis(200)
                    } else {
                        RESYNC
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "discovery failed");
                    Duration::from_secs(2)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = crd_changed.notified() => {}
            }
        }
    }

    async fn worker(self: Arc<Self>, job: Job) {
        self.ready.subscribe().wait_for(|r| *r).await.ok();
        let queue = match job {
            Job::Delete => &self.attempt_to_delete,
            Job::Orphan => &self.attempt_to_orphan,
        };
        loop {
            let uid = queue.get().await;
            let work = async {
                let done = match job {
                    Job::Delete => self.attempt_to_delete_item(&uid).await,
                    Job::Orphan => self.orphan_dependents(&uid).await,
                };
                done.map(|()| Action::await_change())
                    .map_err(|e| reconciler::Error::failed(e.to_string()))
            };
            let name = match job {
                Job::Delete => "garbagecollector-delete",
                Job::Orphan => "garbagecollector-orphan",
            };
            let result = guarded(name, uid.clone(), work).await;
            match result {
                Ok(_) => queue.forget(&uid),
                Err(e) => {
                    tracing::info!(uid = %uid, ?job, error = %e, "retrying");
                    queue.add_rate_limited(&uid);
                }
            }
            queue.done(&uid);
        }
    }

    /// The API for an object's kind and namespace; `None` for a namespaced kind named
    /// without a namespace (a cluster-scoped dependent's owner cannot be namespaced).
    fn api_for(&self, id: &Identity) -> Result<Option<Api<DynamicObject>>, Error> {
        let resolved = self
            .mapper
            .read()
            .expect("mapper lock")
            .resolve(&id.api_version, &id.kind);
        let Some((ar, namespaced)) = resolved else {
            return Err(Error::UnknownKind {
                api_version: id.api_version.clone(),
                kind: id.kind.clone(),
            });
        };
        Ok(match (namespaced, id.namespace.as_deref()) {
            (false, _) => Some(Api::all_with(self.client.clone(), &ar)),
            (true, Some(ns)) => Some(Api::namespaced_with(self.client.clone(), ns, &ar)),
            (true, None) => None,
        })
    }

    /// The object as it is now, if it is the one `id` names (same uid).
    async fn live(
        &self,
        id: &Identity,
    ) -> Result<Option<(Api<DynamicObject>, PartialObjectMeta<DynamicObject>)>, Error> {
        let Some(api) = self.api_for(id)? else {
            return Ok(None);
        };
        match api.get_metadata_opt(&id.name).await? {
            Some(obj) if obj.metadata.uid.as_deref() == Some(id.uid.as_str()) => {
                Ok(Some((api, obj)))
            }
            _ => Ok(None),
        }
    }

    fn forget_absent(&self, uid: &str) {
        let work = self.graph.lock().expect("graph lock").absent(uid);
        self.enqueue(work);
    }

    /// Upstream's attemptToDeleteItem.
    async fn attempt_to_delete_item(&self, uid: &str) -> Result<(), Error> {
        let Some(node) = self.graph.lock().expect("graph lock").node(uid).cloned() else {
            return Ok(());
        };
        if node.being_deleted && !node.deleting_dependents {
            return Ok(());
        }
        let Some((api, latest)) = self.live(&node.identity).await? else {
            tracing::debug!(object = ?node.identity, "absent; its dependents are checked next");
            self.forget_absent(uid);
            return Ok(());
        };
        if node.virtual_ {
            // It exists; its watch will add it to the graph.
            return Ok(());
        }
        if node.deleting_dependents {
            return self.process_deleting_dependents(&node.identity).await;
        }
        let owners = latest.metadata.owner_references.clone().unwrap_or_default();
        if owners.is_empty() {
            return Ok(());
        }
        let namespace = node.identity.namespace.clone();
        let (mut solid, mut dangling, mut waiting) = (Vec::new(), Vec::new(), Vec::new());
        for owner in owners {
            let owner_id = Identity {
                api_version: owner.api_version.clone(),
                kind: owner.kind.clone(),
                namespace: namespace.clone(),
                name: owner.name.clone(),
                uid: owner.uid.clone(),
            };
            match self.live(&owner_id).await? {
                None => dangling.push(owner),
                Some((_, o))
                    if o.metadata.deletion_timestamp.is_some()
                        && o.finalizers().iter().any(|f| f == FOREGROUND) =>
                {
                    waiting.push(owner)
                }
                Some(_) => solid.push(owner),
            }
        }
        let name = node.identity.name.as_str();
        if !solid.is_empty() {
            if dangling.is_empty() && waiting.is_empty() {
                return Ok(());
            }
            let gone: Vec<String> = dangling
                .iter()
                .chain(&waiting)
                .map(|o| o.uid.clone())
                .collect();
            tracing::info!(object = name, owners = ?gone, "removing references to owners that are gone or being deleted");
            return remove_owner_references(&api, &latest, &gone).await;
        }
        let has_dependents = !node.dependents.is_empty();
        let policy = if !waiting.is_empty() && has_dependents {
            PropagationPolicy::Foreground
        } else if latest.finalizers().iter().any(|f| f == ORPHAN) {
            PropagationPolicy::Orphan
        } else if latest.finalizers().iter().any(|f| f == FOREGROUND) {
            PropagationPolicy::Foreground
        } else {
            PropagationPolicy::Background
        };
        tracing::info!(object = name, kind = %node.identity.kind, ?policy, "deleting an object whose owners are all gone");
        let params = DeleteParams {
            propagation_policy: Some(policy),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: latest.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// An owner deleted in the foreground: delete its blocking dependents, and let it go
    /// once none is left.
    async fn process_deleting_dependents(&self, owner: &Identity) -> Result<(), Error> {
        let blocking = self
            .graph
            .lock()
            .expect("graph lock")
            .blocking_dependents(&owner.uid);
        if blocking.is_empty() {
            tracing::info!(object = %owner.name, "no blocking dependents left; removing the foregroundDeletion finalizer");
            return self.remove_finalizer(owner, FOREGROUND).await;
        }
        for (dependent, being_deleted) in blocking {
            if !being_deleted {
                self.attempt_to_delete.add(&dependent);
            }
        }
        Ok(())
    }

    /// Upstream's attemptToOrphanWorker: strip references to the owner from its dependents,
    /// then the `orphan` finalizer from the owner.
    async fn orphan_dependents(&self, uid: &str) -> Result<(), Error> {
        let (owner, dependents) = {
            let graph = self.graph.lock().expect("graph lock");
            let Some(node) = graph.node(uid) else {
                return Ok(());
            };
            (node.identity.clone(), graph.dependents(uid))
        };
        for dependent in dependents {
            if let Some((api, latest)) = self.live(&dependent).await? {
                remove_owner_references(&api, &latest, &[uid.to_string()]).await?;
            }
        }
        tracing::info!(object = %owner.name, "dependents orphaned; removing the orphan finalizer");
        self.remove_finalizer(&owner, ORPHAN).await
    }

    async fn remove_finalizer(&self, id: &Identity, finalizer: &str) -> Result<(), Error> {
        let Some((api, latest)) = self.live(id).await? else {
            return Ok(());
        };
        let finalizers = latest.finalizers();
        if !finalizers.iter().any(|f| f == finalizer) {
            return Ok(());
        }
        let kept: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
        let patch = json!({"metadata": {
            "resourceVersion": latest.metadata.resource_version,
            "finalizers": if kept.is_empty() { None } else { Some(kept) },
        }});
        match api
            .patch_metadata(&id.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Drops the ownerReferences to `uids`, at the version read (a conflict retries).
async fn remove_owner_references(
    api: &Api<DynamicObject>,
    latest: &PartialObjectMeta<DynamicObject>,
    uids: &[String],
) -> Result<(), Error> {
    let refs = latest.owner_references();
    let kept: Vec<&OwnerReference> = refs.iter().filter(|r| !uids.contains(&r.uid)).collect();
    if kept.len() == refs.len() {
        return Ok(());
    }
    let patch = json!({"metadata": {
        "resourceVersion": latest.metadata.resource_version,
        "ownerReferences": if kept.is_empty() { None } else { Some(kept) },
    }});
    match api
        .patch_metadata(
            &latest.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One resource's metadata watch, translated into graph changes.
async fn monitor(client: Client, ar: ApiResource, tx: mpsc::UnboundedSender<Change>) {
    let key = resource_key(&ar);
    // `PartialObjectMeta` makes the watch metadata-only.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
    let mut events = pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    let mut listed = HashSet::new();
    while let Some(event) = events.next().await {
        let change = match event {
            Ok(Event::Init) => {
                listed.clear();
                continue;
            }
            Ok(Event::InitApply(obj)) => {
                let Some(observed) = observe(&ar, obj) else {
                    continue;
                };
                listed.insert(observed.identity.uid.clone());
                Change::Upsert(key.clone(), observed)
            }
            Ok(Event::InitDone) => Change::Relisted(key.clone(), std::mem::take(&mut listed)),
            Ok(Event::Apply(obj)) => match observe(&ar, obj) {
                Some(observed) => Change::Upsert(key.clone(), observed),
                None => continue,
            },
            Ok(Event::Delete(obj)) => match obj.metadata.uid {
                Some(uid) => Change::Delete(uid),
                None => continue,
            },
            Err(e) => {
                tracing::debug!(resource = %key, error = %e, "watch error");
                continue;
            }
        };
        if tx.send(change).is_err() {
            return;
        }
    }
}

fn observe(ar: &ApiResource, obj: PartialObjectMeta<DynamicObject>) -> Option<Observed> {
    let meta = obj.metadata;
    Some(Observed {
        identity: Identity {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            namespace: meta.namespace,
            name: meta.name?,
            uid: meta.uid?,
        },
        owners: meta.owner_references.unwrap_or_default(),
        being_deleted: meta.deletion_timestamp.is_some(),
        finalizers: meta.finalizers.unwrap_or_default(),
    })
}

struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
