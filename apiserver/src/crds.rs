//! The CRD controllers of upstream's apiextensions-apiserver, in the server process: they
//! watch the stored CustomResourceDefinitions (no polling) and
//!
//! - give each CRD its accepted names and the `NamesAccepted` and `Established` conditions
//!   (NamingConditionController and EstablishingController),
//! - serve every served version of an accepted CRD: routing, discovery, OpenAPI
//!   (the CRD handler and the discovery and OpenAPI controllers),
//! - delete the custom resources of a deleted CRD, then release its
//!   `customresourcecleanup.apiextensions.k8s.io` finalizer (CRDFinalizer).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionCondition,
};
use minik8s_api::crd::CustomStrategy;
use minik8s_api::crd::names::{
    self, CLEANUP_FINALIZER, ESTABLISHED, TERMINATING, condition, set_condition,
};
use minik8s_api::crd::strategy::is_served;
use minik8s_api::strategy::{BuiltIn, Strategy};
use minik8s_api::{ApiError, meta};
use tokio::sync::watch;

use crate::handlers::custom::served_versions;
use crate::handlers::openapi::Gvk;
use crate::handlers::resource::Endpoint;
use crate::registry::generic::{DeleteOpts, GenericRegistry, ListQuery};
use crate::server::ApiServer;
use crate::storage::{DynStore, Event, ListOptions, Revision, StoreError};

type Crd = CustomResourceDefinition;
type CrdRegistry = GenericRegistry<BuiltIn<Crd>>;
/// A served resource: group, version, plural.
type Key = (String, String, String);

/// How long the cleanup of a deleted CRD waits for its objects to go (finalizers of their
/// own may hold them) before it reports and retries, as upstream.
const CLEANUP_WAIT: Duration = Duration::from_secs(60);

/// What is served for one CRD.
struct Serving {
    /// What the endpoints were built from: uid, spec and accepted names.
    fingerprint: String,
    terminating: bool,
    keys: Vec<Key>,
    gvks: Vec<Gvk>,
    teardown: watch::Sender<bool>,
}

struct Controller {
    server: Weak<ApiServer>,
    store: DynStore,
    crds: Arc<CrdRegistry>,
    prefix: String,
    /// The CRDs as last seen, by name.
    state: BTreeMap<String, Crd>,
    serving: BTreeMap<String, Serving>,
    /// UIDs of CRDs whose custom resources are being deleted.
    cleanups: Arc<Mutex<BTreeSet<String>>>,
}

/// Serves the custom resources of the CRDs stored now, then follows every change in the
/// background for as long as the server lives.
pub async fn start(server: &Arc<ApiServer>) -> Result<(), StoreError> {
    let crds = server.registry::<Crd>();
    let prefix = crds.strategy.key_root();
    let mut c = Controller {
        server: Arc::downgrade(server),
        store: server.store.clone(),
        crds,
        prefix,
        state: BTreeMap::new(),
        serving: BTreeMap::new(),
        cleanups: Arc::new(Mutex::new(BTreeSet::new())),
    };
    let revision = c.resync().await?;
    tokio::spawn(c.run(revision));
    Ok(())
}

fn crd_name(crd: &Crd) -> String {
    crd.metadata.name.clone().unwrap_or_default()
}

impl Controller {
    /// Reads every CRD and reconciles; returns the revision read at.
    async fn resync(&mut self) -> Result<Revision, StoreError> {
        let list = self
            .store
            .list(ListOptions {
                prefix: self.prefix.clone(),
                ..Default::default()
            })
            .await?;
        self.state.clear();
        for kv in &list.kvs {
            match self.crds.decode(kv) {
                Ok(crd) => {
                    self.state.insert(crd_name(&crd), crd);
                }
                Err(e) => tracing::warn!(key = %kv.key, error = %e.message, "undecodable CRD"),
            }
        }
        self.reconcile().await;
        Ok(list.revision)
    }

    async fn run(mut self, mut revision: Revision) {
        loop {
            if self.server.strong_count() == 0 {
                return;
            }
            match self.follow(&mut revision).await {
                Ok(()) => {}
                Err(e) => tracing::warn!(error = %e, "watching CRDs; starting over"),
            }
            // The watch ended (compaction or a store failure): read everything again.
            loop {
                if self.server.strong_count() == 0 {
                    return;
                }
                match self.resync().await {
                    Ok(r) => {
                        revision = r;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "listing CRDs failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }
    }

    /// Applies watch events until the stream ends.
    async fn follow(&mut self, revision: &mut Revision) -> Result<(), StoreError> {
        let mut stream = self.store.watch(&self.prefix, *revision).await?;
        while let Some(item) = stream.next().await {
            if self.server.strong_count() == 0 {
                return Ok(());
            }
            match item? {
                Event::Progress(r) => *revision = r,
                Event::Put { kv, .. } => {
                    *revision = kv.mod_revision;
                    match self.crds.decode(&kv) {
                        Ok(crd) => {
                            self.state.insert(crd_name(&crd), crd);
                        }
                        Err(e) => {
                            tracing::warn!(key = %kv.key, error = %e.message, "undecodable CRD")
                        }
                    }
                    self.reconcile().await;
                }
                Event::Delete { prev, revision: r } => {
                    *revision = r;
                    if let Some(name) = prev.key.strip_prefix(&self.prefix) {
                        self.state.remove(name);
                    }
                    self.reconcile().await;
                }
            }
        }
        Ok(())
    }

    async fn reconcile(&mut self) {
        self.reconcile_names().await;
        self.start_cleanups();
        self.reconcile_serving();
    }

    /// Names and conditions, oldest CRD first so that it keeps the names it claimed.
    async fn reconcile_names(&mut self) {
        let mut order: Vec<(String, String)> = self
            .state
            .values()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(|c| {
                let created = c
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .unwrap_or_default();
                (created, crd_name(c))
            })
            .collect();
        order.sort();
        for (_, name) in order {
            let Some(crd) = self.state.get(&name) else {
                continue;
            };
            let now = meta::now();
            let group: Vec<&Crd> = self
                .state
                .values()
                .filter(|c| c.spec.group == crd.spec.group)
                .collect();
            if names::reconcile_status(crd, group, &now).is_none() {
                continue;
            }
            let others: Vec<Crd> = self
                .state
                .values()
                .filter(|c| c.spec.group == crd.spec.group && crd_name(c) != name)
                .cloned()
                .collect();
            let result = self
                .crds
                .guaranteed_update(None, &name, None, false, |current| {
                    let mut new = current.clone();
                    let group = others.iter().chain(std::iter::once(&current));
                    if let Some(status) = names::reconcile_status(&current, group, &now) {
                        new.status = Some(status);
                    }
                    Ok(new)
                })
                .await;
            match result {
                Ok((updated, false)) => {
                    log_conditions(&updated);
                    self.state.insert(name, updated);
                }
                Ok((_, true)) => {
                    self.state.remove(&name);
                }
                Err(e) if e.code == 404 => {
                    self.state.remove(&name);
                }
                Err(e) => tracing::warn!(crd = %name, error = %e.message, "updating CRD status"),
            }
        }
    }

    fn start_cleanups(&self) {
        for crd in self.state.values() {
            let has_finalizer = crd
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == CLEANUP_FINALIZER);
            if crd.metadata.deletion_timestamp.is_none() || !has_finalizer {
                continue;
            }
            let uid = crd.metadata.uid.clone().unwrap_or_default();
            if !self
                .cleanups
                .lock()
                .expect("cleanups lock")
                .insert(uid.clone())
            {
                continue;
            }
            let cleanups = self.cleanups.clone();
            let store = self.store.clone();
            let crds = self.crds.clone();
            let name = crd_name(crd);
            tokio::spawn(async move {
                let mut backoff = Duration::from_millis(500);
                loop {
                    match finalize(&store, &crds, &name, &uid).await {
                        Ok(()) => break,
                        Err(e) => {
                            tracing::warn!(crd = %name, error = %e.message, "cleaning up custom resources; will retry");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(30));
                        }
                    }
                }
                cleanups.lock().expect("cleanups lock").remove(&uid);
            });
        }
    }

    /// Registers and unregisters endpoints so that exactly the served versions of accepted
    /// CRDs are served.
    fn reconcile_serving(&mut self) {
        let Some(server) = self.server.upgrade() else {
            return;
        };
        let wanted: BTreeMap<String, &Crd> = self
            .state
            .iter()
            .filter(|(_, c)| is_served(c))
            .map(|(n, c)| (n.clone(), c))
            .collect();
        let gone: Vec<String> = self
            .serving
            .keys()
            .filter(|n| !wanted.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(old) = self.serving.remove(&name) {
                stop(&server, old);
                tracing::info!(crd = %name, "stopped serving custom resources");
            }
        }
        for (name, crd) in wanted {
            let fingerprint = serde_json::to_string(&(
                &crd.metadata.uid,
                &crd.spec,
                crd.status.as_ref().and_then(|s| s.accepted_names.as_ref()),
            ))
            .unwrap_or_default();
            let terminating =
                crd.metadata.deletion_timestamp.is_some() || names::is_true(crd, TERMINATING);
            let (teardown, previous) = match self.serving.remove(&name) {
                Some(p) if p.fingerprint == fingerprint && p.terminating == terminating => {
                    self.serving.insert(name, p);
                    continue;
                }
                // Only the verbs change while the CRD terminates: open watches go on.
                Some(p) if p.fingerprint == fingerprint => (p.teardown, Some((p.keys, p.gvks))),
                Some(p) => {
                    let _ = p.teardown.send(true);
                    (watch::channel(false).0, Some((p.keys, p.gvks)))
                }
                None => (watch::channel(false).0, None),
            };
            let owned: BTreeSet<Key> = self
                .serving
                .values()
                .flat_map(|s| s.keys.iter().cloned())
                .chain(previous.iter().flat_map(|(keys, _)| keys.iter().cloned()))
                .collect();
            let mut keys = Vec::new();
            let mut gvks = Vec::new();
            for v in served_versions(
                crd,
                &server.store,
                &server.options,
                terminating,
                &teardown.subscribe(),
            ) {
                let info = v.endpoint.info().clone();
                let key = (
                    info.group.clone(),
                    info.version.clone(),
                    info.plural.clone(),
                );
                if !owned.contains(&key) && server.endpoint(&key.0, &key.1, &key.2).is_some() {
                    tracing::warn!(crd = %name, group = %key.0, version = %key.1, resource = %key.2, "a built-in resource is served there; not serving the custom resource");
                    continue;
                }
                server.openapi.register_schema(v.gvk.clone(), v.schema);
                server.register(v.endpoint);
                keys.push(key);
                gvks.push(v.gvk);
            }
            if let Some((old_keys, old_gvks)) = previous {
                for key in old_keys.iter().filter(|k| !keys.contains(k)) {
                    server.unregister(&key.0, &key.1, &key.2);
                }
                for gvk in old_gvks.iter().filter(|g| !gvks.contains(g)) {
                    server.openapi.remove_schema(gvk);
                }
            }
            tracing::info!(crd = %name, versions = keys.len(), terminating, "serving custom resources");
            self.serving.insert(
                name,
                Serving {
                    fingerprint,
                    terminating,
                    keys,
                    gvks,
                    teardown,
                },
            );
        }
    }
}

fn stop(server: &ApiServer, serving: Serving) {
    for key in &serving.keys {
        server.unregister(&key.0, &key.1, &key.2);
    }
    for gvk in &serving.gvks {
        server.openapi.remove_schema(gvk);
    }
    let _ = serving.teardown.send(true);
}

fn log_conditions(crd: &Crd) {
    for c in crd
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
    {
        tracing::debug!(crd = %crd_name(crd), condition = %c.type_, status = %c.status, reason = c.reason.as_deref().unwrap_or(""), "CRD condition");
    }
}

/// Sets a condition on the stored CRD (the `uid` one); with `release`, also removes the
/// cleanup finalizer, which lets the CRD go.
async fn set_crd_condition(
    crds: &CrdRegistry,
    name: &str,
    uid: &str,
    cond: CustomResourceDefinitionCondition,
    release: bool,
) -> Result<(), ApiError> {
    let now = meta::now();
    let result = crds
        .guaranteed_update(None, name, None, false, |current| {
            if current.metadata.uid.as_deref() != Some(uid) {
                return Err(ApiError::not_found(crds.target(name)));
            }
            let mut new = current.clone();
            set_condition(
                new.status.get_or_insert_with(Default::default),
                cond.clone(),
                &now,
            );
            if release && let Some(f) = new.metadata.finalizers.as_mut() {
                f.retain(|f| f != CLEANUP_FINALIZER);
                if f.is_empty() {
                    new.metadata.finalizers = None;
                }
            }
            Ok(new)
        })
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

fn terminating(reason: &str, message: &str) -> CustomResourceDefinitionCondition {
    condition(TERMINATING, "True", reason, message)
}

/// Upstream's CRDFinalizer for one deleted CRD: delete every custom resource, wait for them
/// to be gone, release the finalizer.
async fn finalize(
    store: &DynStore,
    crds: &CrdRegistry,
    name: &str,
    uid: &str,
) -> Result<(), ApiError> {
    let crd = match crds.get(None, name).await {
        Ok(c) if c.metadata.uid.as_deref() == Some(uid) => c,
        Ok(_) => return Ok(()),
        Err(e) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e),
    };
    if !crd
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == CLEANUP_FINALIZER)
    {
        return Ok(());
    }
    set_crd_condition(
        crds,
        name,
        uid,
        terminating(
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        ),
        false,
    )
    .await?;
    let done = if names::is_true(&crd, ESTABLISHED) {
        match delete_instances(store, &crd).await {
            Ok(()) => condition(
                TERMINATING,
                "False",
                "InstanceDeletionCompleted",
                "removed all instances",
            ),
            Err(cond) => {
                let message = cond.message.clone().unwrap_or_default();
                set_crd_condition(crds, name, uid, cond, false).await?;
                return Err(ApiError::internal(message));
            }
        }
    } else {
        condition(
            TERMINATING,
            "False",
            "NeverEstablished",
            "resource was never established",
        )
    };
    set_crd_condition(crds, name, uid, done, true).await?;
    tracing::info!(crd = %name, "custom resources deleted; CRD released");
    Ok(())
}

/// Deletes every object of `crd` through the generic registry (finalizers and graceful
/// deletion as for any delete), then waits, watching, until none is left.
async fn delete_instances(
    store: &DynStore,
    crd: &Crd,
) -> Result<(), CustomResourceDefinitionCondition> {
    let storage = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
        .unwrap_or_default();
    let strategy = CustomStrategy::new(crd, &storage).map_err(|e| {
        terminating(
            "InstanceDeletionFailed",
            &format!(
                "could not list instances: unable to find a custom resource client for {}.{}: {e}",
                crd.spec.names.plural, crd.spec.group
            ),
        )
    })?;
    let reg = GenericRegistry::new(strategy, store.clone());
    let list_failed = |e: ApiError| {
        terminating(
            "InstanceDeletionFailed",
            &format!("could not list instances: {}", e.message),
        )
    };
    let all = reg
        .list(None, &ListQuery::default())
        .await
        .map_err(list_failed)?;
    let namespaces: BTreeSet<Option<String>> = all
        .items
        .iter()
        .map(|o| o.metadata.namespace.clone())
        .collect();
    let mut errors = Vec::new();
    for ns in namespaces {
        if let Err(e) = reg
            .delete_collection(ns.as_deref(), &ListQuery::default(), &DeleteOpts::default())
            .await
        {
            errors.push(e.message);
        }
    }
    if !errors.is_empty() {
        let message = if errors.len() == 1 {
            errors.remove(0)
        } else {
            format!("[{}]", errors.join(", "))
        };
        return Err(terminating(
            "InstanceDeletionFailed",
            &format!("could not issue all deletes: {message}"),
        ));
    }
    let deadline = tokio::time::Instant::now() + CLEANUP_WAIT;
    let check_failed = |message: String| {
        terminating(
            "InstanceDeletionCheck",
            &format!("could not confirm zero CustomResources remaining: {message}"),
        )
    };
    loop {
        let list = reg
            .list(None, &ListQuery::default())
            .await
            .map_err(|e| check_failed(e.message))?;
        if list.items.is_empty() {
            return Ok(());
        }
        tracing::debug!(crd = %crd_name(crd), left = list.items.len(), "waiting for custom resources to be removed");
        let prefix = reg.strategy.key_root();
        let mut stream = store
            .watch(&prefix, list.resource_version)
            .await
            .map_err(|e| check_failed(e.to_string()))?;
        // Until something under the prefix changes, or the deadline.
        loop {
            let next = tokio::time::timeout_at(deadline, stream.next()).await;
            match next {
                Err(_) => return Err(check_failed("timed out waiting for the condition".into())),
                Ok(Some(Ok(Event::Progress(_)))) => continue,
                Ok(_) => break,
            }
        }
    }
}
