//! The caches the scheduler reads beyond pods and nodes, shared with the other controllers
//! through the informers: namespaces for affinity terms' `namespaceSelector`, what selects a
//! pod for the default spreading, and PodDisruptionBudgets for preemption.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use minik8s_api::selector::{Requirement, Selector};

use super::volume_binding::StorageListers;
use crate::informers::{Cache as Lister, Informers};

/// The caches a decision reads beyond pods and nodes: namespaces for affinity terms'
/// `namespaceSelector`, and what selects a pod for the default spreading.
pub struct Listers {
    namespaces: Lister<Namespace>,
    services: Lister<Service>,
    controllers: Lister<ReplicationController>,
    replica_sets: Lister<ReplicaSet>,
    stateful_sets: Lister<StatefulSet>,
    pub budgets: Lister<PodDisruptionBudget>,
    /// Claims, volumes and classes, for VolumeBinding.
    pub storage: StorageListers,
}

impl Listers {
    /// Waits for every cache's first list (upstream waits for its informers to sync before
    /// scheduling), at most `limit`: a decision without them only misses defaults.
    pub async fn wait_until_ready(&self, limit: Duration) {
        let all = async {
            let _ = tokio::join!(
                self.namespaces.wait_until_ready(),
                self.services.wait_until_ready(),
                self.controllers.wait_until_ready(),
                self.replica_sets.wait_until_ready(),
                self.stateful_sets.wait_until_ready(),
                self.budgets.wait_until_ready(),
                self.storage.claims.wait_until_ready(),
                self.storage.volumes.wait_until_ready(),
                self.storage.classes.wait_until_ready(),
            );
        };
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!(
                "scheduling before the namespace, service, controller, budget and storage caches are complete"
            );
        }
    }

    pub fn new(informers: &Informers) -> Self {
        Listers {
            namespaces: informers.of::<Namespace>().store(),
            services: informers.of::<Service>().store(),
            controllers: informers.of::<ReplicationController>().store(),
            replica_sets: informers.of::<ReplicaSet>().store(),
            stateful_sets: informers.of::<StatefulSet>().store(),
            budgets: informers.of::<PodDisruptionBudget>().store(),
            storage: StorageListers {
                claims: informers.of::<PersistentVolumeClaim>().store(),
                volumes: informers.of::<PersistentVolume>().store(),
                classes: informers.of::<StorageClass>().store(),
            },
        }
    }

    pub fn namespace_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.namespaces
            .get(&ObjectRef::new(name))
            .and_then(|n| n.metadata.labels.clone())
    }

    /// Upstream's `DefaultSelector`: the selectors of the Services selecting the pod merged,
    /// with its ReplicationController's, ReplicaSet's or StatefulSet's selector added.
    pub fn default_selector(&self, pod: &Pod) -> Selector {
        let ns = pod.namespace().unwrap_or_default();
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let mut merged: BTreeMap<String, String> = BTreeMap::new();
        for svc in self.services.state() {
            if svc.metadata.namespace.as_deref() != Some(ns.as_str()) {
                continue;
            }
            // A Service without a selector selects nothing, not everything.
            let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                continue;
            };
            if sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                merged.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let owner = crate::informers::controller_of(pod);
        let mut extra = Vec::new();
        match owner.map(|o| (o.api_version.as_str(), o.kind.as_str(), o.name.as_str())) {
            Some(("v1", "ReplicationController", name)) => {
                if let Some(rc) = self.controllers.get(&ObjectRef::new(name).within(&ns)) {
                    let sel = rc.spec.as_ref().and_then(|s| s.selector.clone());
                    merged.extend(sel.unwrap_or_default());
                }
            }
            Some(("apps/v1", "ReplicaSet", name)) => {
                if let Some(rs) = self.replica_sets.get(&ObjectRef::new(name).within(&ns)) {
                    extra = selector_requirements(rs.spec.as_ref().map(|s| &s.selector));
                }
            }
            Some(("apps/v1", "StatefulSet", name)) => {
                if let Some(ss) = self.stateful_sets.get(&ObjectRef::new(name).within(&ns)) {
                    extra = selector_requirements(ss.spec.as_ref().map(|s| &s.selector));
                }
            }
            _ => {}
        }
        let mut requirements: Vec<Requirement> = merged
            .into_iter()
            .map(|(k, v)| Requirement::Equals(k, v))
            .collect();
        requirements.extend(extra);
        Selector {
            requirements,
            nothing: false,
        }
    }
}

fn selector_requirements(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Vec<Requirement> {
    Selector::from_label_selector(selector)
        .map(|s| s.requirements)
        .unwrap_or_default()
}
