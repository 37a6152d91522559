//! Claiming dependents, as upstream's `ControllerRefManager`: a controller owns the objects
//! whose controller reference names its UID; it adopts orphans its selector matches and
//! releases owned objects its selector no longer matches. Only the controller reference decides
//! ownership, never labels alone, so two controllers with overlapping selectors do not fight.
//!
//! Adoption re-reads the owner from the API first (upstream's `RecheckDeletionTimestamp`): an
//! owner that is being deleted, or was replaced by a new object of the same name, must not
//! adopt anything.

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use minik8s_api::selector::Selector;
use serde::de::DeserializeOwned;

/// The controller reference of `obj`, if any (in the informers crate: its index needs it).
pub use minik8s_informers::controller_of;

/// Whether `obj` is controlled by `owner` (by UID).
pub fn is_controlled_by(obj: &impl Resource, owner: &impl Resource) -> bool {
    controller_of(obj).is_some_and(|r| Some(&r.uid) == owner.meta().uid.as_ref())
}

/// The owners of kind `K` that a change of `dependent` concerns (upstream's
/// `resolveControllerRef`, then `getPodReplicaSets` and its kin for orphans): its controller
/// when that is a `K`; nothing when another kind controls it, or when it is an orphan on its
/// way out; else every `K` of its namespace whose selector (`selector_of`) matches it, since
/// one of them may adopt it. Every workload controller maps its dependents through this.
pub fn owners_of<K, D>(
    owners: &Store<K>,
    dependent: &D,
    selector_of: impl Fn(&K) -> Option<&LabelSelector>,
) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    D: Resource,
{
    owners_selecting(owners, dependent, |o| {
        Selector::from_label_selector(selector_of(o)).ok()
    })
}

/// [`owners_of`] for owners whose selector is not a `LabelSelector` (a ReplicationController's
/// label map): `selector_of` gives it parsed, or `None` when it is invalid.
pub fn owners_selecting<K, D>(
    owners: &Store<K>,
    dependent: &D,
    selector_of: impl Fn(&K) -> Option<Selector>,
) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    D: Resource,
{
    let ns = dependent.meta().namespace.clone().unwrap_or_default();
    if let Some(owner) = controller_of(dependent) {
        let same_kind =
            owner.kind == K::kind(&()) && group_of(&owner.api_version) == K::group(&()).as_ref();
        return match same_kind {
            true => vec![ObjectRef::new(&owner.name).within(&ns)],
            false => Vec::new(),
        };
    }
    if dependent.meta().deletion_timestamp.is_some() {
        return Vec::new();
    }
    let labels = dependent.meta().labels.as_ref();
    owners
        .state()
        .iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(ns.as_str()))
        .filter(|o| selector_of(o).is_some_and(|s| !s.is_empty() && s.matches(labels)))
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

/// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → ``).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// A controller reference to `owner`: `controller` and `blockOwnerDeletion` set, as every
/// upstream workload controller writes it.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: owner.name_any(),
        uid: owner.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Claims the dependents of `owner` among `candidates` (objects of its namespace): returns
/// the ones it owns after adopting matching orphans and releasing owned objects that no
/// longer match. Errors of single adoptions or releases are logged and leave that object out.
pub async fn claim<K, D>(
    owner: &K,
    owner_api: &Api<K>,
    dependents_api: &Api<D>,
    selector: &Selector,
    candidates: impl IntoIterator<Item = Arc<D>>,
) -> Result<Vec<Arc<D>>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    D: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    claim_with_finalizers(owner, owner_api, dependents_api, selector, candidates, &[]).await
}

/// [`claim`], adding `finalizers` to the objects it adopts in the same patch (the Job
/// controller's tracking finalizer, as upstream's `NewPodControllerRefManager` does).
pub async fn claim_with_finalizers<K, D>(
    owner: &K,
    owner_api: &Api<K>,
    dependents_api: &Api<D>,
    selector: &Selector,
    candidates: impl IntoIterator<Item = Arc<D>>,
    finalizers: &[&str],
) -> Result<Vec<Arc<D>>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    D: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let owner_uid = owner.uid().unwrap_or_default();
    let owner_deleting = owner.meta().deletion_timestamp.is_some();
    // Whether a fresh read of the owner allows adoption; read at most once per claim.
    let mut can_adopt: Option<bool> = None;
    let mut claimed = Vec::new();
    // Most candidates belong to other controllers: the selector is matched only against
    // the owner's own objects and orphans.
    let matches = |obj: &D| selector.matches(obj.meta().labels.as_ref());
    for obj in candidates {
        match controller_of(obj.as_ref()) {
            Some(r) if r.uid != owner_uid => {}
            Some(_) => {
                if matches(&obj) {
                    claimed.push(obj);
                } else if !owner_deleting && obj.meta().deletion_timestamp.is_none() {
                    release(dependents_api, obj.as_ref(), &owner_uid).await;
                }
            }
            None => {
                if owner_deleting || obj.meta().deletion_timestamp.is_some() || !matches(&obj) {
                    continue;
                }
                if obj.meta().namespace != owner.meta().namespace {
                    continue;
                }
                let allowed = match can_adopt {
                    Some(a) => a,
                    None => {
                        let fresh = owner_api.get_opt(&owner.name_any()).await?;
                        let a = fresh.is_some_and(|f| {
                            f.uid() == owner.uid() && f.meta().deletion_timestamp.is_none()
                        });
                        can_adopt = Some(a);
                        a
                    }
                };
                if !allowed {
                    continue;
                }
                if let Some(adopted) = adopt(dependents_api, obj.as_ref(), owner, finalizers).await
                {
                    claimed.push(Arc::new(adopted));
                }
            }
        }
    }
    Ok(claimed)
}

/// Adds `owner`'s controller reference; the UID in the patch makes it fail on a recreated
/// object of the same name.
async fn adopt<K, D>(api: &Api<D>, obj: &D, owner: &K, finalizers: &[&str]) -> Option<D>
where
    K: Resource<DynamicType = ()>,
    D: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let mut patch = serde_json::json!({
        "metadata": {
            "ownerReferences": [controller_ref(owner)],
            "uid": obj.uid(),
        }
    });
    if !finalizers.is_empty() {
        patch["metadata"]["finalizers"] = serde_json::json!(finalizers);
    }
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        Ok(adopted) if is_controlled_by(&adopted, owner) => Some(adopted),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(object = %obj.name_any(), error = %e, "adopting");
            None
        }
    }
}

async fn release<D>(api: &Api<D>, obj: &D, owner_uid: &str)
where
    D: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let patch = serde_json::json!({
        "metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
            "uid": obj.uid(),
        }
    });
    if let Err(e) = api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        tracing::debug!(object = %obj.name_any(), error = %e, "releasing");
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::{reflector, watcher};

    use super::*;

    fn rs(name: &str, ns: &str, app: &str) -> ReplicaSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
            "spec": {"selector": {"matchLabels": {"app": app}}, "template": {}}
        }))
        .unwrap()
    }

    fn pod(app: &str, owner: Option<(&str, &str, &str)>, deleting: bool) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "a", "labels": {"app": app}}
        }))
        .unwrap();
        if let Some((api_version, kind, name)) = owner {
            p.metadata.owner_references = Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                controller: Some(true),
                ..Default::default()
            }]);
        }
        if deleting {
            p.metadata.deletion_timestamp =
                serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
        }
        p
    }

    #[test]
    fn owners_are_the_controller_of_its_kind_or_the_matching_sets_of_an_orphan() {
        let (store, mut writer) = reflector::store::<ReplicaSet>();
        writer.apply_watcher_event(&watcher::Event::Init);
        for set in [
            rs("web", "a", "web"),
            rs("web2", "a", "web"),
            rs("db", "a", "db"),
            rs("web", "b", "web"),
        ] {
            writer.apply_watcher_event(&watcher::Event::InitApply(set));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let names = |p: &Pod| {
            let mut n: Vec<String> = owners_of(&store, p, |s: &ReplicaSet| {
                s.spec.as_ref().map(|s| &s.selector)
            })
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
            n.sort();
            n
        };
        // An orphan: every set of its namespace whose selector matches it.
        assert_eq!(names(&pod("web", None, false)), ["a/web", "a/web2"]);
        // ... unless it is on its way out.
        assert!(names(&pod("web", None, true)).is_empty());
        // Controlled by a ReplicaSet: that one, even when its labels no longer match.
        assert_eq!(
            names(&pod("db", Some(("apps/v1", "ReplicaSet", "web")), false)),
            ["a/web"]
        );
        // Controlled by another kind, or a kind of the same name in another group: none.
        assert!(names(&pod("web", Some(("batch/v1", "Job", "web")), false)).is_empty());
        assert!(
            names(&pod(
                "web",
                Some(("example.com/v1", "ReplicaSet", "web")),
                false
            ))
            .is_empty()
        );
    }
}
