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

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use minik8s_api::selector::Selector;
use serde::de::DeserializeOwned;

/// The controller reference of `obj`, if any (in the informers crate: its index needs it).
pub use minik8s_informers::controller_of;

/// Whether `obj` is controlled by `owner` (by UID).
pub fn is_controlled_by(obj: &impl Resource, owner: &impl Resource) -> bool {
    controller_of(obj).is_some_and(|r| Some(&r.uid) == owner.meta().uid.as_ref())
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
