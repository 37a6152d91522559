//! The scale a percentage budget is a share of: for each pod, the controller that decides how
//! many such pods there should be, as upstream's finders pick it. A ReplicaSet that belongs to
//! a Deployment defers to the Deployment (its own replicas move during a rollout); the four
//! workload kinds are read from the caches, and any other kind through its `/scale`
//! subresource, so custom workloads count too.

use std::collections::{HashMap, hash_map::Entry};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, discovery};

use crate::util::controller_ref::controller_of;

/// A pod's controller and its scale (upstream's `controllerAndScale`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerScale {
    pub uid: String,
    pub scale: i32,
}

/// The caches of the workload kinds upstream reads without the API.
#[derive(Clone)]
pub struct Workloads {
    pub replication_controllers: Store<ReplicationController>,
    pub deployments: Store<Deployment>,
    pub replica_sets: Store<ReplicaSet>,
    pub stateful_sets: Store<StatefulSet>,
}

/// Upstream's `schema.ParseGroupVersion`: `(group, version)`.
pub fn parse_group_version(api_version: &str) -> Result<(&str, &str), String> {
    if api_version.is_empty() || api_version == "/" {
        return Ok(("", ""));
    }
    match api_version.matches('/').count() {
        0 => Ok(("", api_version)),
        1 => Ok(api_version.split_once('/').unwrap_or_default()),
        _ => Err(format!("unexpected GroupVersion string: {api_version}")),
    }
}

/// Upstream's `verifyGroupKind`.
fn is_kind(owner: &OwnerReference, kind: &str, groups: &[&str]) -> Result<bool, String> {
    let (group, _) = parse_group_version(&owner.api_version)?;
    Ok(owner.kind == kind && groups.contains(&group))
}

/// The cached `K` that `owner` names, if it is still that object (same UID).
fn cached<K: Resource<DynamicType = ()> + Clone>(
    store: &Store<K>,
    owner: &OwnerReference,
    namespace: &str,
) -> Option<Arc<K>> {
    store
        .get(&ObjectRef::new(&owner.name).within(namespace))
        .filter(|o| o.meta().uid.as_deref() == Some(owner.uid.as_str()))
}

fn found<K: Resource>(obj: &K, replicas: Option<i32>) -> Option<ControllerScale> {
    Some(ControllerScale {
        uid: obj.meta().uid.clone().unwrap_or_default(),
        // The API server defaults replicas to 1.
        scale: replicas.unwrap_or(1),
    })
}

const APPS: &[&str] = &["apps", "extensions"];

impl Workloads {
    /// Upstream's cached finders, in its order: ReplicationController, the Deployment of a
    /// ReplicaSet, a ReplicaSet no Deployment controls, StatefulSet. `None` when none of them
    /// knows `owner`.
    pub fn find_cached(
        &self,
        owner: &OwnerReference,
        namespace: &str,
    ) -> Result<Option<ControllerScale>, String> {
        if is_kind(owner, "ReplicationController", &[""])?
            && let Some(rc) = cached(&self.replication_controllers, owner, namespace)
        {
            return Ok(found(
                rc.as_ref(),
                rc.spec.as_ref().and_then(|s| s.replicas),
            ));
        }
        if is_kind(owner, "ReplicaSet", APPS)?
            && let Some(rs) = cached(&self.replica_sets, owner, namespace)
        {
            // getPodDeployment.
            if let Some(rs_owner) = controller_of(rs.as_ref())
                && is_kind(rs_owner, "Deployment", APPS)?
                && let Some(d) = cached(&self.deployments, rs_owner, namespace)
            {
                return Ok(found(d.as_ref(), d.spec.as_ref().and_then(|s| s.replicas)));
            }
            // getPodReplicaSet: a ReplicaSet a Deployment controls never answers for itself,
            // even when that Deployment is not (or no longer) cached.
            if controller_of(rs.as_ref()).is_none_or(|o| o.kind != "Deployment") {
                return Ok(found(
                    rs.as_ref(),
                    rs.spec.as_ref().and_then(|s| s.replicas),
                ));
            }
        }
        if is_kind(owner, "StatefulSet", &["apps"])?
            && let Some(ss) = cached(&self.stateful_sets, owner, namespace)
        {
            return Ok(found(
                ss.as_ref(),
                ss.spec.as_ref().and_then(|s| s.replicas),
            ));
        }
        Ok(None)
    }
}

/// Resolved kinds for `/scale` reads, by group, version and kind: the resource, and whether
/// it serves a scale subresource (upstream's REST mapper and discovery).
#[derive(Default)]
pub struct ScaleReader {
    resources: Mutex<HashMap<GroupVersionKindKey, Resolved>>,
}

/// Group, version and kind.
type GroupVersionKindKey = (String, String, String);
/// A kind's resource, and whether it serves `/scale`.
type Resolved = (ApiResource, bool);

impl ScaleReader {
    /// Upstream's `getScaleController`: the owner's scale read through `/scale`; `None` when it
    /// is gone or is another object now.
    pub async fn find(
        &self,
        client: &Client,
        owner: &OwnerReference,
        namespace: &str,
    ) -> Result<Option<ControllerScale>, String> {
        let (group, version) = parse_group_version(&owner.api_version)?;
        let key = (group.to_string(), version.to_string(), owner.kind.clone());
        let cached = self.lock().get(&key).cloned();
        let (resource, has_scale) = match cached {
            Some(r) => r,
            None => {
                let gvk = GroupVersionKind::gvk(group, version, &owner.kind);
                let (resource, caps) =
                    discovery::pinned_kind(client, &gvk)
                        .await
                        .map_err(|e| match e {
                            kube::Error::Discovery(_) | kube::Error::Api(_) => format!(
                                "no matches for kind {:?} in version {:?}",
                                owner.kind, owner.api_version
                            ),
                            other => other.to_string(),
                        })?;
                let has_scale = caps.subresources.iter().any(|(s, _)| s.plural == "scale");
                match self.lock().entry(key) {
                    Entry::Occupied(e) => e.get().clone(),
                    Entry::Vacant(e) => e.insert((resource, has_scale)).clone(),
                }
            }
        };
        if !has_scale {
            let group_resource = match resource.group.as_str() {
                "" => resource.plural.clone(),
                g => format!("{}.{g}", resource.plural),
            };
            return Err(format!(
                "{group_resource} does not implement the scale subresource"
            ));
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let scale = match api.get_scale(&owner.name).await {
            Ok(s) => s,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        if scale.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
            return Ok(None);
        }
        Ok(Some(ControllerScale {
            uid: owner.uid.clone(),
            scale: scale.spec.and_then(|s| s.replicas).unwrap_or(0),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<GroupVersionKindKey, Resolved>> {
        self.resources.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Upstream's `getExpectedScale`: the summed scale of the pods' controllers, each counted once,
/// and the names of the pods without a controller (which cannot be accounted for). A pod
/// whose controller no finder knows is an error.
pub async fn expected_scale(
    workloads: &Workloads,
    scales: &ScaleReader,
    client: &Client,
    pods: &[Arc<Pod>],
) -> Result<(i32, Vec<String>), String> {
    let mut by_controller: HashMap<String, i32> = HashMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(owner) = controller_of(pod.as_ref()) else {
            unmanaged.push(name);
            continue;
        };
        if by_controller.contains_key(&owner.uid) {
            continue;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let found = match workloads.find_cached(owner, namespace)? {
            Some(f) => Some(f),
            None => scales.find(client, owner, namespace).await?,
        };
        let Some(found) = found else {
            return Err(format!("found no controllers for pod {name:?}"));
        };
        by_controller.insert(found.uid, found.scale);
    }
    let total = by_controller
        .values()
        .fold(0i32, |a, b| a.saturating_add(*b));
    Ok((total, unmanaged))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    fn stored<K>(objects: Vec<serde_json::Value>) -> Store<K>
    where
        K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned,
    {
        let (reader, mut writer) = store::<K>();
        for o in objects {
            writer.apply_watcher_event(&Event::Apply(serde_json::from_value(o).unwrap()));
        }
        reader
    }

    fn obj(
        name: &str,
        uid: &str,
        replicas: i32,
        owner: Option<(&str, &str, &str)>,
    ) -> serde_json::Value {
        let owners: Vec<serde_json::Value> = owner
            .into_iter()
            .map(|(kind, name, uid)| {
                serde_json::json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true})
            })
            .collect();
        serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "ownerReferences": owners},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
        })
    }

    fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            ..Default::default()
        }
    }

    fn workloads() -> Workloads {
        Workloads {
            replication_controllers: stored(vec![serde_json::json!({
                "metadata": {"name": "rc", "namespace": "ns", "uid": "rc-uid"},
                "spec": {"replicas": 2},
            })]),
            deployments: stored(vec![obj("web", "d-uid", 5, None)]),
            replica_sets: stored(vec![
                obj("plain", "rs-uid", 3, None),
                obj("web-1", "rs1-uid", 2, Some(("Deployment", "web", "d-uid"))),
                obj("orphaned", "rs2-uid", 4, Some(("Deployment", "gone", "x"))),
            ]),
            stateful_sets: stored(vec![obj("db", "ss-uid", 7, None)]),
        }
    }

    #[test]
    fn each_kind_answers_with_its_scale_and_replica_sets_defer_to_their_deployment() {
        let w = workloads();
        let scale = |o: OwnerReference| w.find_cached(&o, "ns").unwrap().map(|c| (c.uid, c.scale));
        assert_eq!(
            scale(owner("v1", "ReplicationController", "rc", "rc-uid")),
            Some(("rc-uid".into(), 2))
        );
        assert_eq!(
            scale(owner("apps/v1", "ReplicaSet", "plain", "rs-uid")),
            Some(("rs-uid".into(), 3))
        );
        assert_eq!(
            scale(owner("apps/v1", "ReplicaSet", "web-1", "rs1-uid")),
            Some(("d-uid".into(), 5))
        );
        assert_eq!(
            scale(owner("apps/v1", "StatefulSet", "db", "ss-uid")),
            Some(("ss-uid".into(), 7))
        );
        // A Deployment's ReplicaSet whose Deployment is not cached: left to /scale.
        assert_eq!(
            scale(owner("apps/v1", "ReplicaSet", "orphaned", "rs2-uid")),
            None
        );
        // Another object of the same name, a wrong group, an unknown kind: not found.
        assert_eq!(
            scale(owner("apps/v1", "ReplicaSet", "plain", "old-uid")),
            None
        );
        assert_eq!(scale(owner("v1", "ReplicaSet", "plain", "rs-uid")), None);
        assert_eq!(scale(owner("example.com/v1", "Thing", "t", "t-uid")), None);
        assert!(
            w.find_cached(&owner("a/b/c", "ReplicaSet", "plain", "rs-uid"), "ns")
                .is_err()
        );
    }

    #[test]
    fn group_versions_parse_as_upstream() {
        assert_eq!(parse_group_version("apps/v1"), Ok(("apps", "v1")));
        assert_eq!(parse_group_version("v1"), Ok(("", "v1")));
        assert_eq!(parse_group_version(""), Ok(("", "")));
        assert!(parse_group_version("a/b/c").is_err());
    }
}
